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
if (transcript) {
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
