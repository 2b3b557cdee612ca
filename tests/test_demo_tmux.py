"""`tracer demo` in a real terminal: tmux runs it, sends keys and reads the screen back.

Next (Enter, space, →), back (b, ←), jump (a number then Enter), quiz reveal, quit, and that the
terminal is restored afterwards (echo and line mode back on). Skipped when tmux is not installed
(`apt-get install -y tmux`).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Pane:
    """One detached tmux session running a command, on its own tmux server (-S socket), 100 × 60 unless told."""

    def __init__(self, command: str, socket: str, size: tuple[int, int] = (100, 60)):
        self.socket = socket
        self.name = "demo"
        done = ("rc=$?; echo; echo EXITED $rc; "
                "echo TTY $(stty -a | tr ' ' '\\n' | grep -x -e icanon -e echo | tr '\\n' ' '); sleep 60")
        self.tmux("new-session", "-d", "-s", self.name, "-x", str(size[0]), "-y", str(size[1]),
                  f"cd {shlex.quote(ROOT)} && {command}; {done}")

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", self.socket, *args], capture_output=True, text=True, check=True,
                              timeout=10).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.name)

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.name, *keys)

    def wait_for(self, pattern: str, timeout: float = 20.0) -> str:
        end = time.monotonic() + timeout
        while True:
            text = self.screen()
            if re.search(pattern, text, flags=re.M):
                return text
            if time.monotonic() > end:
                raise AssertionError(f"timed out waiting for {pattern!r}; screen:\n{text}")
            time.sleep(0.1)

    def heading(self, n: int, name: str = "") -> str:
        return self.wait_for(rf"^Step {n} of 14 · {re.escape(name)}")

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True, timeout=10)


def demo_cmd(*args: str) -> str:
    return shlex.join([sys.executable, "-m", "tracer", "demo", "--prompt", "A B C D E F", *args])


@pytest.fixture
def pane_factory(tmp_path):
    panes = []

    def make(command: str, size: tuple[int, int] = (100, 60)) -> Pane:
        p = Pane(command, str(tmp_path / f"tmux-{len(panes)}"), size)
        panes.append(p)
        return p

    yield make
    for p in panes:
        p.close()


def test_next_back_jump_and_quit_in_a_real_terminal(pane_factory):
    p = pane_factory(demo_cmd())
    first = p.heading(1, "Tokens")
    assert first.splitlines()[0].startswith("Step 1 of 14 · Tokens")  # the screen was cleared: heading on top
    assert "q quit" in first
    assert re.search(r"^▶\s+B\s", first, flags=re.M)  # the followed token, marked
    p.keys("Enter")
    p.heading(2, "Embedding lookup")
    p.keys("Space")
    p.heading(3, "Position vector")
    p.keys("Right")
    p.heading(4, "Query, Key and Value")
    p.keys("b")
    p.heading(3, "Position vector")
    p.keys("Left")
    screen = p.heading(2, "Embedding lookup")
    assert "Step 3 of 14" not in screen  # one step per screen
    p.keys("1", "2")
    p.wait_for(r"go to step 12_")
    p.keys("Enter")
    p.heading(12, "The chosen token")
    p.keys("9", "9", "Enter")
    p.wait_for(r"There is no step 99")
    p.heading(12)
    p.keys("1", "4", "Enter")
    p.heading(14, "The KV cache")
    p.keys("Enter")
    p.wait_for(r"This is the last step")
    p.keys("q")
    after = p.wait_for(r"^TTY ")
    assert re.search(r"^EXITED 0$", after, flags=re.M)
    assert re.search(r"^TTY icanon echo", after, flags=re.M), after  # the terminal is back to normal


def test_quiz_pauses_before_the_answer(pane_factory):
    p = pane_factory(demo_cmd("--quiz"))
    p.heading(1)
    p.keys("5", "Enter")
    q = p.heading(5, "Scores and the mask — your turn")
    assert "Predict, then press Enter" in q and "Q·K" not in q
    p.keys("Enter")
    a = p.wait_for(r"^Step 5 of 14 · Scores and the mask ━")
    assert "Q·K" in a and "your turn" not in a
    p.keys("q")
    p.wait_for(r"^EXITED 0$")


def test_auto_advances_and_ctrl_c_restores_the_terminal(pane_factory):
    p = pane_factory(demo_cmd("--auto", "0.3"))
    p.heading(3)  # reached without a key
    p.keys("C-c")
    after = p.wait_for(r"^TTY ")
    assert re.search(r"^EXITED 130$", after, flags=re.M)
    assert re.search(r"^TTY icanon echo", after, flags=re.M), after


@pytest.mark.parametrize("size", [(80, 24), (100, 40)])
def test_the_articles_long_steps_are_one_screen_each(pane_factory, size):
    """Issue 27: `demo article` steps 5, 9 and 10 went on to a second, nearly empty screen at 80×24;
    folded, each is one screen (no "(1/2)"), its last numbers and the keys in view."""
    p = pane_factory(shlex.join([sys.executable, "-m", "tracer", "demo", "article"]), size)
    p.heading(1, "Tokens")
    for n, name, last in ((5, "Scores and the mask", r"✗ article \(B\): \"Q·B_K = 0\.8\""),
                          (9, "The other layers", r"^F out of layer 23 \(the last\)"),
                          (10, "Unembedding: one score per token", r"← generation uses this row")):
        p.keys(*str(n), "Enter")
        screen = p.wait_for(rf"^Step {n} of 14 · {re.escape(name)} ━")
        screen = p.wait_for(last)
        lines = screen.rstrip("\n").splitlines()
        assert len(lines) <= size[1] and "continued on the next page" not in screen
        assert lines[0].startswith(f"Step {n} of 14 · {name} ━") and f"[{n}/14] Enter/→ next" in lines[-1]
    p.keys("q")
    p.wait_for(r"^EXITED 0$")


@pytest.mark.parametrize("size", [(80, 24), (120, 35)])
def test_a_routed_models_experts_and_softmax_screens_in_a_real_terminal(pane_factory, size):
    """gpt-oss-tiny: the softmax screen's sink row and the experts' screen (router scores, the kept experts,
    their weighted sum, the experts not used), each one screen with the keys in view; with --quiz the experts'
    screen asks first, then shows the weights."""
    model = os.path.join(ROOT, "tests", "data", "gpt-oss-tiny")
    p = pane_factory(shlex.join([sys.executable, "-m", "tracer", "demo", "--model", model, "--prompt",
                                 "the cat sat on the mat", "--quiz"]), size)
    p.wait_for(r"^Step 1 of 16 · Tokens")
    for n, name, last in ((6, "Softmax: scores become weights", r"^\s+sink\s+-?\d\.\d{3}\s+\d\.\d{3}\s+\d\.\d{3}"),
                          (9, "Experts: the router's choice", r"experts not used by this token")):
        p.keys(*str(n), "Enter")
        asked = p.wait_for(rf"^Step {n} of 16 · {re.escape(name)} — your turn")
        assert "Predict, then press Enter" in asked and "not used" not in asked
        p.keys("Enter")
        screen = p.wait_for(rf"^Step {n} of 16 · {re.escape(name)} ━")
        screen = p.wait_for(last)
        lines = screen.rstrip("\n").splitlines()
        assert len(lines) <= size[1] and "continued on the next page" not in screen
        assert f"[{n}/16] Enter/→ next" in lines[-1]
        if n == 9:
            assert re.search(r"^▶\s+E\d+\s+-?\d+\.\d{3}\s+\d\.\d{3}\s+\[", screen, flags=re.M)  # a kept expert, its weight, its output
            assert "B's mixture of experts = " in screen and "×E" in screen
    p.keys("q")
    p.wait_for(r"^EXITED 0$")


def test_the_readmes_first_command_pages_says_how_to_leave_and_stays_on_the_screen(pane_factory):
    """`tracer trace "A B C D E F"` at a 100 × 30 terminal goes through less: its prompt says how to move and leave,
    and after q what was read is still on the screen (less's alternate screen left it empty), the shell's next
    line under it. A PAGER of the user's own is left to them (unset here, as on a new machine)."""
    cmd = "env -u PAGER -u MANPAGER -u LESS " + shlex.join([sys.executable, "-m", "tracer", "trace", "A B C D E F"])
    pane = pane_factory(cmd, size=(100, 30))
    first = pane.wait_for(r"q quits \(what you read stays on the screen\)", timeout=60)
    assert "Step" not in first.splitlines()[-1] and "tracer · model abc" in first  # the first screenful, then the prompt
    pane.keys("q")
    after = pane.wait_for(r"^EXITED 0", timeout=20)
    shown = [line for line in after.splitlines() if line.strip()]
    assert len(shown) > 20 and any("tracer · model abc" in line or "│" in line for line in shown), after
