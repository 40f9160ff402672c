// Airlock's web page: the little that needs a script. Loaded as a module from this
// origin (the Content-Security-Policy allows no inline script and no other origin).
// Everything works without it; it only keeps the approvals list and a session's
// transcript fresh.

const badge = document.getElementById("nav-approvals");
if (badge) {
  // Reload the approvals page's list when the queue changes, unless a form is being
  // filled in (a reload must never throw away a half-made decision).
  const onApprovals = location.pathname === "/approvals";
  let last = null;
  setInterval(async () => {
    try {
      const r = await fetch("/approvals/count", { credentials: "same-origin" });
      if (!r.ok) return;
      const n = (await r.text()).trim();
      if (last !== null && n !== last && onApprovals && !document.querySelector("form.decide :focus")) {
        location.reload();
      }
      last = n;
    } catch (_) {
      // The host is away: try again next time.
    }
  }, 2000);
}

// A session's page follows its transcript: when the session has said more, the page is
// drawn again, unless a message is being typed.
const transcript = document.getElementById("transcript");
// A session live in the host streams what it says instead (below): the page is not drawn
// again under it.
const liveText = document.getElementById("live-text");
if (transcript && !liveText) {
  const id = transcript.dataset.session;
  const shown = transcript.dataset.length;
  const typing = () => {
    const box = document.getElementById("next-prompt");
    return box && (box === document.activeElement || box.value !== "");
  };
  setInterval(async () => {
    try {
      const r = await fetch("/sessions/" + encodeURIComponent(id) + "/length", { credentials: "same-origin" });
      if (!r.ok) return;
      const n = (await r.text()).trim();
      if (n !== shown && !typing()) location.reload();
    } catch (_) {
      // The host is away: try again next time.
    }
  }, 1000);
}

// The model's reply as it comes, while a run this page started is typing it: the host
// sends it as server-sent events; it is shown as text only (textContent), and the page is
// drawn again from the transcript once the reply is done.
if (transcript) {
  const events = new EventSource("/sessions/" + encodeURIComponent(transcript.dataset.session) + "/stream");
  let shown = null;
  events.addEventListener("text", (e) => {
    if (shown === null) {
      shown = document.createElement("pre");
      shown.id = "reply-streaming";
      shown.className = "streaming";
      transcript.after(shown);
    }
    shown.textContent += JSON.parse(e.data);
  });
  events.addEventListener("done", () => {
    events.close();
    if (shown !== null) shown.classList.add("done");
  });
}

// A session live in the host, attached to: what it said lately, then what it says as it
// says it, whoever runs its turn. Shown as text only (textContent); the host has made its
// hidden characters visible already.
if (liveText) {
  const id = document.getElementById("live").dataset.session;
  const events = new EventSource("/sessions/" + encodeURIComponent(id) + "/live");
  events.addEventListener("text", (e) => {
    liveText.textContent += JSON.parse(e.data);
    liveText.scrollTop = liveText.scrollHeight;
  });
  events.addEventListener("done", () => {
    events.close();
    liveText.classList.add("done");
  });
}

// Passkeys, on the page served remotely (docs/web.md). The server makes every challenge;
// this only hands its options to the browser's authenticator and posts the answer back.
// `null`s are dropped first: the browser's JSON parsers want absent members, not nulls.
const dropNulls = (v) => {
  if (Array.isArray(v)) return v.map(dropNulls);
  if (v && typeof v === "object") {
    const out = {};
    for (const [k, x] of Object.entries(v)) if (x !== null) out[k] = dropNulls(x);
    return out;
  }
  return v;
};
const status = (text) => {
  const el = document.getElementById("passkey-status");
  if (el) el.textContent = text;
};
const postJson = async (path, body) => {
  const r = await fetch(path, {
    method: "POST",
    credentials: "same-origin",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const answer = await r.json().catch(() => ({ error: "the host's answer cannot be read" }));
  if (!r.ok) throw new Error(answer.error || "refused");
  return answer;
};
const assert = async (options) => {
  const publicKey = PublicKeyCredential.parseRequestOptionsFromJSON(dropNulls(options.publicKey));
  const credential = await navigator.credentials.get({ publicKey });
  return credential.toJSON();
};

const enrol = document.getElementById("passkey-enrol");
if (enrol) {
  enrol.addEventListener("click", async () => {
    try {
      status("Asking your authenticator…");
      const options = JSON.parse(enrol.dataset.options);
      const publicKey = PublicKeyCredential.parseCreationOptionsFromJSON(dropNulls(options.publicKey));
      const credential = await navigator.credentials.create({ publicKey });
      const done = await postJson("/enroll/finish", {
        ceremony: enrol.dataset.ceremony,
        credential: credential.toJSON(),
        label: (document.getElementById("passkey-label") || { value: "" }).value,
      });
      enrol.disabled = true;
      status("Enrolled. Log in with it now.");
      const next = document.createElement("a");
      next.href = done.next;
      next.id = "enrolled";
      next.textContent = "Log in";
      enrol.after(next);
    } catch (e) {
      status("Not enrolled: " + e.message);
    }
  });
}

const login = document.getElementById("passkey-login");
if (login) {
  login.addEventListener("click", async () => {
    try {
      status("Asking your authenticator…");
      const start = await postJson("/passkey/login", {});
      const credential = await assert(start.options);
      const done = await postJson("/passkey/login/finish", { ceremony: start.ceremony, credential });
      location.assign(done.next);
    } catch (e) {
      status("Not logged in: " + e.message);
    }
  });
}

// An approval on the page served remotely (a held action, or a held memory change): the
// server binds a challenge to this request, the payload hash the page drew, the decision
// and the grant's scope and duration chosen; the passkey signs it; the form then carries
// the assertion. A denial needs no passkey.
for (const form of document.querySelectorAll("form.decide[data-passkey]")) {
  form.addEventListener("submit", async (event) => {
    // Approving, revoking a passkey, rolling memory back: each needs the passkey's assertion.
    const approving = event.submitter && ["approve", "revoke", "rollback"].includes(event.submitter.value);
    if (!approving || form.elements.assertion.value !== "") return;
    event.preventDefault();
    const button = event.submitter;
    try {
      const body = new URLSearchParams({
        csrf: form.elements.csrf.value,
        // A held memory change names itself as its subject; a held action by its id.
        id: form.dataset.subject || form.elements.id.value,
        hash: form.elements.hash.value,
        // What the form will send with it: a grant's scope and duration are signed too.
        decision: button.value,
        scope: form.elements.scope ? form.elements.scope.value : "",
        duration: form.elements.duration ? form.elements.duration.value : "",
      });
      const r = await fetch("/approvals/challenge", { method: "POST", credentials: "same-origin", body });
      const start = await r.json();
      if (!r.ok) throw new Error(start.error || "refused");
      const credential = await assert(start.options);
      form.elements.ceremony.value = start.ceremony;
      form.elements.assertion.value = JSON.stringify(credential);
      form.requestSubmit(button);
    } catch (e) {
      const note = document.createElement("p");
      note.className = "error passkey-error";
      note.textContent = "Not approved: " + e.message;
      form.append(note);
    }
  });
}
