// tracer serve --lesson: the class's bar (follow the teacher, the lesson's step, the question) or the teacher's
// (◀ ▶ through the lesson, the notes, the tally, the answer's reveal, the join address and its QR code).
// The state comes as server-sent events (/api/lesson/events; /teach/SECRET/events for the teacher). A page
// that follows applies it with the page's own controls, as docs/page.md lets a script drive them
// ([data-goto], [data-layer], [data-head], [data-pass], [data-token]); every page keeps its own prompt: a token
// is sent as a position and the prompt's length, and the last prompt token and those after it are counted
// from the end of each page's own prompt. The words are render/words_lesson.py's (lesson-data.words).
(() => {
  const $ = id => window.document.getElementById(id);
  const doc = window.document, body = doc.body;
  const L = JSON.parse($("lesson-data").textContent);
  const say = (key, slots = {}) => L.words[key].replace(/\{(\w+)\}/g, (_, k) => String(slots[k]));
  const teacher = L.role === "teacher";
  const base = teacher ? location.pathname.replace(/\/+$/, "") : "";  // /teach/SECRET: the teacher's routes
  const KEPT = "tracer-lesson-page";   // sessionStorage: this tab's page id, so that a reload is the same page
  let state = null, following = true, at = 0, page = null, source = null, said = "";
  const mine = {};                     // lesson step → the choice this page sent
  try { page = sessionStorage.getItem(KEPT); } catch (e) { /* no storage: a new id each time */ }

  function el(tag, props, ...kids) {
    const e = doc.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) if (v !== null && v !== undefined && v !== false) e.setAttribute(k, v === true ? "" : String(v));
    e.append(...kids.filter(k => k !== null && k !== undefined));
    return e;
  }

  function tell(words, kind) {
    const s = $("lesson-status");
    s.textContent = words;
    s.className = kind || "";
    body.dataset.lesson = kind || "joined";
  }

  let facts = null, factsRun = null;
  function pageFacts() {               // the page's run: its prompt's length, positions, passes, step titles
    if (!facts || factsRun !== body.dataset.runs) {
      const d = JSON.parse($("trace-data").textContent);
      facts = { n_prompt: d.n_prompt, n_rows: d.n_rows, passes: d.passes.length, titles: Object.fromEntries(d.steps.map(s => [s[0], s[2]])) };
      factsRun = body.dataset.runs;
    }
    return facts;
  }

  function where() {                   // what this page shows now (its address, which the page keeps)
    const q = new URLSearchParams(location.hash.slice(1));
    const int = k => (q.has(k) && Number.isInteger(Number(q.get(k))) ? Number(q.get(k)) : null);
    return { show: body.dataset.step, layer: int("layer"), head: int("head"), token: int("token"), n_prompt: pageFacts().n_prompt, pass: int("pass") };
  }

  function press(selector) {           // one of the page's controls, pressed unless it is already on
    const b = doc.querySelector(selector);
    if (b && !b.disabled && b.getAttribute("aria-pressed") !== "true" && !b.hasAttribute("aria-current")) b.click();
  }

  function tokenHere(token, n) {       // the teacher's position (on a prompt of n tokens) on this page's prompt
    if (token === null || token === undefined || !n) return null;
    const f = pageFacts();
    const t = token >= n - 1 ? f.n_prompt - 1 + (token - (n - 1)) : Math.min(token, f.n_prompt - 1);
    return Math.max(0, Math.min(t, f.n_rows - 1));
  }

  function apply(want) {
    if (!want || !want.show) return;
    press(`#path [data-goto="${want.show}"]`);
    if (want.layer !== null && want.layer !== undefined) press(`#layers [data-layer="${want.layer}"]`);
    if (want.head !== null && want.head !== undefined) press(`#heads [data-head="${want.head}"]`);
    if (want.pass !== null && want.pass !== undefined) press(`#passes [data-pass="${Math.min(want.pass, pageFacts().passes - 1)}"]`);
    const t = tokenHere(want.token, want.n_prompt);
    if (t !== null) press(`#tokens [data-token="${t}"]`);
  }

  // ------------------------------------------------------------------ the bar and the question

  function drawBar() {
    const i = state ? state.lesson_step : at, step = L.steps[i];
    $("lesson-step").textContent = say("lesson.step", { i: i + 1, n: L.steps.length, title: step.title || pageFacts().titles[step.show] || step.show });
    if (teacher) {
      $("lesson-prev").disabled = i === 0;
      $("lesson-next").disabled = i === L.steps.length - 1;
      $("notes-text").textContent = step.notes || "";
      $("lesson-notes").hidden = !step.notes;
      $("followers").textContent = state ? say("lesson.followers", { n: state.followers }) : "";
    } else {
      $("follow-label").title = following ? say("lesson.following") : say("lesson.on_your_own");
    }
  }

  function drawQuestion() {
    const i = state ? state.lesson_step : at, q = L.steps[i].question, st = state && state.question;
    const box = $("question");
    box.hidden = !q || !st;
    body.classList.toggle("asking", !!(q && st && st.status === "open" && (teacher || following)));
    body.dataset.question = q && st ? st.status : "none";
    if (!q || !st) return;
    const shown = st.status === "shown", choice = mine[i], tally = teacher && state.tally && state.tally.lesson_step === i ? state.tally : null;
    $("question-ask").textContent = q.ask;
    $("question-choices").replaceChildren(...q.labels.map((label, k) => {
      const b = el("button", { type: "button", "data-choice": k, "aria-pressed": choice === k ? "true" : "false",
        class: [q.kind === "next_token" ? "token" : "", shown && k === st.answer ? "right" : ""].join(" ").trim() || null },
        el("span", { class: "label" }, label), tally ? el("span", { class: "count", "data-count": tally.counts[k] }, String(tally.counts[k])) : null);
      b.disabled = teacher || shown;
      return b;
    }));
    const answer = shown ? q.labels[st.answer] : "";
    const mark = choice === undefined ? null : q.labels[choice];
    $("question-note").textContent = said || (teacher ? "" : shown ? (mark === null ? say("lesson.the_answer", { answer })
      : choice === st.answer ? say("lesson.right", { answer }) : say("lesson.wrong", { answer, choice: mark }))
      : mark === null ? say("lesson.answer_first") : say("lesson.answered", { choice: mark }));
    if (teacher) {
      const t = tally || { answered: 0 };
      $("tally").textContent = say("lesson.tally", { answered: t.answered, pages: state.followers });
      $("tally").dataset.answered = String(t.answered);
      $("reveal").disabled = shown;
      $("reveal").textContent = shown ? say("lesson.shown") : say("lesson.reveal");
    }
  }

  function draw() { drawBar(); drawQuestion(); }

  async function post(url, data) {     // JSON to the server: its answer, or {error} in its words
    try {
      const r = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(data) });
      const answer = await r.json().catch(() => ({}));
      return r.ok ? answer : { error: answer.error || String(r.status) };
    } catch (e) {
      return { error: say("lesson.lost") };
    }
  }

  async function choose(k) {
    const i = state.lesson_step;
    const r = await post("/api/lesson/answer", { page, lesson_step: i, choice: k });
    said = r.error ? say("lesson.refused", { error: r.error }) : "";
    if (!r.error) mine[i] = k;
    drawQuestion();
  }

  // ------------------------------------------------------------------ the stream

  function onState(st) {
    const moved = !state || st.lesson_step !== state.lesson_step;
    if (moved) said = "";
    if (teacher && !state) {           // the teacher's page (re)opens where the class is, or on the lesson's first step
      at = st.lesson_step;
      state = st;
      acked = st.version;
      if (st.n_prompt !== null) apply(st); else goLesson(at);
    } else if (teacher && st.version > acked && !busy && !timer) {  // another teacher's page moved the class (the
      acked = st.version;              // laptop beside the projector): this one goes there too, and sends nothing back
      at = st.lesson_step;
      if (st.n_prompt !== null) apply(st);
      sent = JSON.stringify(Object.assign({ lesson_step: at }, where()));
    }
    state = st;
    if (!teacher && following) apply(st);
    draw();
  }

  function connect() {
    const url = teacher ? `${base}/events` : `/api/lesson/events${page ? `?page=${encodeURIComponent(page)}` : ""}`;
    tell(say("lesson.joining"), "waiting");
    const es = source = new EventSource(url);
    es.onmessage = e => {
      if (!teacher && e.lastEventId && e.lastEventId !== page) {
        page = e.lastEventId;
        try { sessionStorage.setItem(KEPT, page); } catch (x) { /* kept in memory only */ }
      }
      tell(say("lesson.joined"), "joined");
      onState(JSON.parse(e.data));
    };
    es.onerror = () => {
      if (es.readyState !== EventSource.CLOSED) { tell(say("lesson.lost"), "waiting"); return; }  // the browser joins again itself
      source = null;                   // refused (the class is full) or gone: ask why, then try again a little later
      fetch("/api/lesson/state").then(r => r.json()).then(s => tell(s.followers >= s.most ? say("lesson.full", { most: s.most }) : say("lesson.lost"), "error"),
        () => tell(say("lesson.ended"), "error"));
      setTimeout(connect, 3000 + Math.random() * 3000);
    };
  }

  // ------------------------------------------------------------------ the teacher moves the class

  let sent = "", timer = null, busy = false, acked = 0;  // acked: the state's version this page's last move made
  function report() {                  // the teacher's page as the class should see it, sent at most every 100 ms,
    if (!teacher || !state || timer) return;  // one move at a time (two in flight could arrive in either order)
    timer = setTimeout(async () => {
      timer = null;
      if (busy) { report(); return; }
      const move = JSON.stringify(Object.assign({ lesson_step: at }, where()));
      if (move === sent) return;
      sent = move;
      busy = true;
      const r = await post(`${base}/move`, JSON.parse(move));
      busy = false;
      if (r.error) { sent = ""; tell(say("lesson.move_refused", { error: r.error }), "error"); }
      else { acked = Math.max(acked, r.version); tell(say("lesson.moved", { i: at + 1 }), "joined"); }
    }, 100);
  }

  function goLesson(i) {
    if (i < 0 || i >= L.steps.length) return;
    at = i;
    const s = L.steps[i], c = s.choices, n = pageFacts().n_prompt;
    const token = c.token === undefined ? null : c.token < 0 ? n + c.token : c.token;
    apply({ show: s.show, layer: c.layer, head: c.head, pass: c.pass, token, n_prompt: n });
    draw();
    report();
  }

  if (teacher) {
    $("lesson-prev").addEventListener("click", () => goLesson(at - 1));
    $("lesson-next").addEventListener("click", () => goLesson(at + 1));
    $("reveal").addEventListener("click", async () => {
      const r = await post(`${base}/move`, { lesson_step: at, reveal: true });
      if (r.error) tell(say("lesson.move_refused", { error: r.error }), "error");
      else acked = Math.max(acked, r.version);
    });
    const join = $("join-url"), qr = $("join-qr");
    join.replaceChildren(el("button", { type: "button", "aria-controls": "join-qr", "aria-expanded": "false" }, say("lesson.join_at", { url: L.join })));
    if (L.qr) qr.setAttribute("src", L.qr);
    join.addEventListener("click", () => {
      qr.hidden = !qr.hidden || !L.qr;
      join.firstChild.setAttribute("aria-expanded", String(!qr.hidden));
    });
    new MutationObserver(report).observe($("tokens"), { childList: true });  // every drawing of the page redraws the chips
  } else {
    const follow = $("follow");
    follow.addEventListener("change", () => {
      following = follow.checked;
      body.dataset.following = String(following);
      if (following && state) apply(state);
      draw();
    });
    body.dataset.following = "true";
    $("question-choices").addEventListener("click", e => {
      const b = e.target.closest("[data-choice]");
      if (b && !b.disabled && state) choose(Number(b.dataset.choice));
    });
    new MutationObserver(() => { if (following && state) apply(state); }).observe(body, { attributes: true, attributeFilter: ["data-runs"] });
  }
  for (const name of Object.keys(L.pinned)) {  // the pinned settings: shown, not changed
    const box = $(`gen-${name.replace(/_/g, "-")}`);
    if (box) { box.disabled = true; box.title = say("lesson.pinned"); }
  }
  draw();
  connect();
})();
