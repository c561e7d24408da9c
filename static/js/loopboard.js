// Small progressive enhancements; every page works without this file.
document.addEventListener("htmx:xhr:progress", (event) => {
  const bar = document.getElementById("upload-progress");
  if (!bar || !event.detail.lengthComputable) return;
  bar.hidden = false;
  bar.value = (event.detail.loaded / event.detail.total) * 100;
});
document.addEventListener("htmx:afterRequest", (event) => {
  const bar = document.getElementById("upload-progress");
  if (bar && event.detail.elt.classList.contains("upload-form")) {
    bar.hidden = true;
    event.detail.elt.reset();
  }
});
