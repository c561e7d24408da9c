// Small progressive enhancements; every page works without this file.

// Upload: the bar follows the bytes of the upload form's own request (xhr.upload), not the
// download of its answer nor the 1 s polls of the trace rows below it (htmx sends
// htmx:xhr:progress for every request, both ways), and it finishes: full, then hidden, when
// the request ends, whether it succeeded or not.
const uploadForm = (event) => event.detail.elt?.closest?.(".upload-form");
document.addEventListener("htmx:beforeSend", (event) => {
  const form = uploadForm(event);
  const bar = form?.querySelector("#upload-progress");
  if (!bar) return;
  bar.value = 0;
  bar.hidden = false;
  event.detail.xhr.upload.addEventListener("progress", (progress) => {
    if (progress.lengthComputable && progress.total) bar.value = (progress.loaded / progress.total) * 100;
  });
});
document.addEventListener("htmx:afterRequest", (event) => {
  const form = uploadForm(event);
  const bar = form?.querySelector("#upload-progress");
  if (!bar || event.detail.elt !== form) return;
  bar.value = 100;
  bar.hidden = true;
  form.reset();
  const chosen = form.querySelector(".dropzone__chosen");
  if (chosen) chosen.replaceChildren();
});

// Upload: files dropped on the upload card go into its file input, which is then listed
// (names and sizes, as text: a file name is untrusted). The input itself still works alone.
(() => {
  const size = (bytes) => (bytes < 1024 ? `${bytes} B` : bytes < 1048576 ? `${(bytes / 1024).toFixed(1)} KB` : `${(bytes / 1048576).toFixed(1)} MB`);
  const list = (zone, files) => {
    const chosen = zone.querySelector(".dropzone__chosen");
    if (!chosen) return;
    chosen.replaceChildren(...[...files].map((file) => {
      const item = document.createElement("li");
      item.textContent = `${file.name} (${size(file.size)})`;
      return item;
    }));
  };
  document.addEventListener("DOMContentLoaded", () => {
    for (const zone of document.querySelectorAll("[data-dropzone]")) {
      const card = zone.closest(".card") || zone;
      const input = zone.querySelector("input[type=file]");
      input.addEventListener("change", () => list(zone, input.files));
      let depth = 0;  // dragenter/leave fire for every child: count to know when it left
      card.addEventListener("dragenter", (event) => {
        if (![...event.dataTransfer.types].includes("Files")) return;
        event.preventDefault();
        depth += 1;
        card.classList.add("is-dragover");
      });
      card.addEventListener("dragover", (event) => {
        if ([...event.dataTransfer.types].includes("Files")) event.preventDefault();
      });
      card.addEventListener("dragleave", () => {
        depth = Math.max(0, depth - 1);
        if (!depth) card.classList.remove("is-dragover");
      });
      card.addEventListener("drop", (event) => {
        depth = 0;
        card.classList.remove("is-dragover");
        if (!event.dataTransfer.files.length) return;
        event.preventDefault();
        input.files = event.dataTransfer.files;
        input.dispatchEvent(new Event("change", { bubbles: true }));
      });
    }
  });
})();

// Findings panel: a click highlights the finding's steps in the timeline (or the folded band
// that holds them) and scrolls there; j/k or the arrow keys move between findings. When the
// steps are not on the page the link loads the window around them (it works without JS).
(() => {
  const targetsFor = (link) => {
    const seqs = (link.dataset.seqs || "").split(" ").filter(Boolean).map(Number);
    const found = [];
    for (const seq of seqs) {
      const row = document.getElementById(`step-${seq}`);
      if (row) { found.push(row); continue; }
      for (const band of document.querySelectorAll(".fold[data-from]")) {
        if (+band.dataset.from <= seq && seq <= +band.dataset.to && !found.includes(band)) found.push(band);
      }
    }
    return found;
  };
  const activate = (link, event) => {
    const targets = targetsFor(link);
    if (!targets.length) return false;
    if (event) event.preventDefault();
    document.querySelectorAll(".is-hl").forEach((el) => el.classList.remove("is-hl"));
    document.querySelectorAll(".finding.is-active").forEach((el) => el.classList.remove("is-active"));
    targets.forEach((el) => el.classList.add("is-hl"));
    link.classList.add("is-active");
    link.focus({ preventScroll: true });
    targets[0].scrollIntoView({ behavior: "smooth", block: "center" });
    history.replaceState(null, "", link.getAttribute("href").split("#")[0]);
    return true;
  };
  document.addEventListener("click", (event) => {
    const link = event.target.closest(".finding[data-seqs]");
    if (link && !event.metaKey && !event.ctrlKey && !event.shiftKey) activate(link, event);
  });
  document.addEventListener("keydown", (event) => {
    if (event.target.closest("input, textarea, select, [contenteditable]")) return;
    if (event.metaKey || event.ctrlKey || event.altKey) return;
    const next = ["j", "ArrowDown"].includes(event.key);
    const prev = ["k", "ArrowUp"].includes(event.key);
    if (!next && !prev) return;
    const links = [...document.querySelectorAll(".finding[data-seqs]")];
    if (!links.length) return;
    if ((event.key === "ArrowDown" || event.key === "ArrowUp") && !event.target.closest(".findings-panel")) return;
    event.preventDefault();
    const current = links.findIndex((el) => el.classList.contains("is-active") || el === document.activeElement);
    const index = current < 0 ? 0 : Math.max(0, Math.min(links.length - 1, current + (next ? 1 : -1)));
    if (!activate(links[index], null)) links[index].click();
  });
  // A page opened on a finding (?focus=) scrolls to its first highlighted step.
  document.addEventListener("DOMContentLoaded", () => {
    const first = document.querySelector(".timeline .is-hl");
    if (first) first.scrollIntoView({ block: "center" });
  });
})();

// Tuning: "Add a tool row" copies the formset's empty row (a <template>) with the next index,
// so one save can hold several new rows. Without JS the page keeps its one blank row.
document.addEventListener("DOMContentLoaded", () => {
  for (const button of document.querySelectorAll("[data-add-row]")) {
    const template = document.getElementById(button.dataset.addRow);
    const total = document.getElementById(button.dataset.total);
    const body = template && template.parentElement.querySelector("table tbody");
    if (!template || !total || !body) continue;
    button.hidden = false;
    button.addEventListener("click", () => {
      const index = Number(total.value);
      if (index >= Number(button.dataset.max)) return;
      const row = template.content.firstElementChild.cloneNode(true);
      for (const el of row.querySelectorAll("[name], [id], [for]")) {
        for (const attr of ["name", "id", "for"]) {
          const value = el.getAttribute(attr);
          if (value) el.setAttribute(attr, value.replace("__prefix__", index));
        }
      }
      body.append(row);
      total.value = index + 1;
      const first = row.querySelector("input");
      if (first) first.focus();
    });
  }
});

// Runs list: the false-alarm reason and words show only while that action is chosen. Without
// JS both stay in view (the server ignores them for the other actions).
document.addEventListener("DOMContentLoaded", () => {
  const action = document.querySelector("#bulk-form select[name=action]");
  if (!action) return;
  const show = () => {
    for (const el of document.querySelectorAll("#bulk-form [data-bulk-for]")) {
      el.hidden = el.dataset.bulkFor !== action.value;
    }
  };
  action.addEventListener("change", show);
  show();
});
