// Labels, keyboard: on the focused finding, `t` marks it a real loop and `f` opens its false
// alarm reasons (the first one focused: Enter picks it, Tab moves on). The label forms work
// without this file; after htmx swaps a label box, focus goes back to its finding.
(() => {
  const focusedItem = () => {
    const here = document.activeElement && document.activeElement.closest(".findings > li");
    if (here) return here;
    const active = document.querySelector(".finding.is-active");
    return active ? active.closest("li") : null;
  };
  document.addEventListener("keydown", (event) => {
    if (event.key !== "t" && event.key !== "f") return;
    if (event.target.closest("input, textarea, select, [contenteditable]")) return;
    if (event.metaKey || event.ctrlKey || event.altKey) return;
    const item = focusedItem();
    const box = item && item.querySelector(".label-box");
    if (!box) return;
    event.preventDefault();
    if (event.key === "t") {
      box.querySelector(".label-box__real button").click();
      return;
    }
    const reasons = box.querySelector(".label-box__false");
    reasons.open = true;
    reasons.querySelector("button[name=reason]").focus();
  });
  // A live run's page re-sends the findings panel every poll: reasons opened stay open.
  const opened = new Set();
  document.addEventListener("toggle", (event) => {
    const reasons = event.target;
    if (!reasons.classList || !reasons.classList.contains("label-box__false")) return;
    const id = reasons.closest(".label-box").id;
    if (reasons.open) opened.add(id); else opened.delete(id);
  }, true);
  document.addEventListener("htmx:oobAfterSwap", () => {
    for (const id of opened) {
      const reasons = document.querySelector(`#${id} .label-box__false`);
      if (reasons) reasons.open = true; else opened.delete(id);
    }
  });
  document.addEventListener("htmx:afterSwap", (event) => {
    const box = event.detail.target;
    if (!box || !box.classList || !box.classList.contains("label-box")) return;
    const link = document.querySelector(`#${box.id.replace("label-", "finding-")} > .finding`);
    if (link) link.focus({ preventScroll: true });
  });
})();
