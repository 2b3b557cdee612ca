"""The words of a led lesson (`tracer serve --lesson FILE.toml`), written once: what the class's bar and the
teacher's bar say (`serve/lesson.js` fills them with `say`, as `serve.js` fills the prompt box's), what the
terminal prints at start, and the starter lesson `tracer lesson new` writes (the teacher's notes for each
page step of the article's walkthrough, and its questions). `tracer/render/words.py` adds `LESSON_WORDS` to
`WORDS` (the same rules: a slot is a name in braces, every value given already formatted); `STARTER_NOTES`
and `STARTER_QUESTIONS` are a file's content, not the page's words, and stay out of `WORDS`."""

from __future__ import annotations

LESSON_WORDS: dict[str, str] = {
    # the class's bar (serve/lesson.js), above the prompt box
    "lesson.follow": "follow the teacher",
    "lesson.following": "following the teacher: your page shows the teacher's step on your own prompt",
    "lesson.on_your_own": "on your own: your page stays where you put it; tick to follow the teacher again",
    "lesson.step": "{i} of {n} · {title}",
    "lesson.joining": "joining the class…",
    "lesson.joined": "in the class",
    "lesson.lost": "lost the class; joining again…",
    "lesson.full": "the class is full ({most} pages follow); trying again in a few seconds",
    "lesson.ended": "the lesson has ended (the server stopped)",
    "lesson.answer_first": "Answer first: the step shows the answer when the teacher reveals it.",
    "lesson.answered": "Your answer is in: {choice}. You can change it until the answer is shown.",
    "lesson.right": "✓ Right: {answer}.",
    "lesson.wrong": "✗ The answer is {answer}; you chose {choice}.",
    "lesson.the_answer": "The answer: {answer}.",
    "lesson.refused": "Your answer was not taken: {error}",
    "lesson.pinned": "pinned by the lesson",
    # the teacher's bar
    "lesson.prev": "previous step of the lesson",
    "lesson.next": "next step of the lesson",
    "lesson.followers": "{n} following",
    "lesson.tally": "{answered} of {pages} pages answered",
    "lesson.reveal": "Show the answer",
    "lesson.shown": "answer shown",
    "lesson.join_at": "join: {url}",
    "lesson.qr": "a QR code of the join address",
    "lesson.notes": "Your notes (only your page shows them)",
    "lesson.moved": "the class sees step {i}",
    "lesson.move_refused": "the server refused the move: {error}",
    # the terminal, at start (serve/lead.py)
    "lesson.terminal.join": "students join: {url}",
    "lesson.terminal.teacher": "teacher (printed only now; keep it to yourself): {url}",
    "lesson.terminal.lesson": "lesson: {title} ({steps} steps, {questions} questions; {model}, pinned: {pinned}); at "
                              "most {followers} student pages follow, {rate} events per second each",
    "lesson.terminal.local": "only this machine can join: --host 0.0.0.0 lets the room's network in",
}

# The starter lesson (`tracer lesson new`): the teacher's notes for each page step (tracer/sections.py's ids)
STARTER_TITLE = "How a transformer picks the next token"
STARTER_HEADER = """A tracer lesson: `tracer serve --lesson FILE` leads a class through these steps (docs/lesson.md).
model, prompt and [generate] are pinned for the class; each [[step]] shows one step of the page (show =),
with the layer, head, token (-1: the last prompt token) and pass the class looks at, the teacher's notes,
and an optional [step.question] the class answers before the step shows the answer.
`tracer lesson check FILE` checks it against the model."""
STARTER_NOTES: dict[str, str] = {
    "tokens": "The model never sees letters, only token ids. Let everyone type a prompt of their own: how many "
              "tokens does it split into, and which tokens carry a leading space?",
    "embed": "Each id picks one row of W_E: the same token starts from the same vector wherever it stands. Where "
             "it stands comes in through the position (added here, or turned into Q and K in a rotary model).",
    "qkv": "Each head makes three vectors of every token: a query (what it looks for), a key (what it offers to "
           "others' queries) and a value (what it passes on). Another head: other numbers, the same shapes.",
    "scores": "Q·K / √d_head scores every earlier token; the causal mask hides the later ones; softmax turns the "
              "row into weights that sum to 1. Ask the question before you show the step.",
    "sum": "The token's new vector is the weights times the values: a weighted average of what the earlier "
           "tokens offer, the heaviest weights counting most.",
    "heads": "Every head does the same with its own weights; their outputs side by side, times W_O. Compare the "
             "heads' heatmaps: which heads look back at the same token, which at the one before?",
    "mlp": "The attention's output is added back to the layer's input (the residual stream); then a norm and the "
           "MLP, which works on each token alone, and its output is added too.",
    "layers": "Every layer repeats these steps with weights of its own. Which layer's heads look at the token "
              "that matters for the prediction?",
    "predict": "The last position's vector times W_U gives one score per token of the vocabulary; softmax at the "
               "temperature turns the scores into probabilities. Ask the question, then move the temperature.",
    "loop": "The chosen token is appended and the model runs again. With the KV cache a pass computes only the "
            "new token's row; the earlier keys and values are read back.",
    "positions": "Every position predicts its own next token in the same pass: training scores all of them (the "
                 "loss); generating reads only the last.",
    "lens": "The logit lens reads every layer's residual stream as the last layer's is read (the final norm, where the model has one, and W_U): at which layer "
            "does the final answer first come out on top?",
}
STARTER_QUESTIONS: dict[str, dict] = {
    "scores": {"kind": "choice", "ask": "Why does a token's attention put no weight on the tokens after it?",
               "choices": ["the causal mask hides them before the softmax", "their embeddings are zero",
                           "softmax always gives the last columns 0"],
               "answer": "the causal mask hides them before the softmax"},
    "predict": {"kind": "next_token", "ask": "Which token does the model put first after the prompt?"},
    "loop": {"kind": "choice", "ask": "With the KV cache, which rows does the second pass compute?",
             "choices": ["only the new token's row", "every row of the prompt again", "none: it reads the answer from the cache"],
             "answer": "only the new token's row"},
}
