// Live refresh: an element with data-refresh="URL" has its contents replaced by the HTML
// fragment at URL every few seconds (data-every, in seconds), while the page is visible.
// Nothing else in the console needs a script; every page works without it.
(function () {
  "use strict";
  function refresh(el) {
    if (document.hidden) return;
    fetch(el.dataset.refresh, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) { if (html !== null) el.innerHTML = html; })
      .catch(function () {});
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-refresh]").forEach(function (el) {
      var every = Math.max(2, parseInt(el.dataset.every || "5", 10)) * 1000;
      setInterval(function () { refresh(el); }, every);
    });
  });
})();
