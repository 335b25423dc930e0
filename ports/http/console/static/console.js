// Hearth console: the little the pages need beyond HTML and htmx.
(function () {
  "use strict";
  // The sign-in form sends the browser's time zone: the console shows and
  // reads times in it.
  document.querySelectorAll("input[data-tz]").forEach(function (el) {
    try {
      el.value = Intl.DateTimeFormat().resolvedOptions().timeZone || "";
    } catch (e) {
      el.value = "";
    }
  });
  // A form is sent once: a second click while the first is on its way
  // would send the write twice.
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    if (!(form instanceof HTMLFormElement) || form.method.toLowerCase() !== "post") {
      return;
    }
    if (form.dataset.sending) {
      ev.preventDefault();
      return;
    }
    form.dataset.sending = "1";
    form.setAttribute("aria-busy", "true");
  });
  // Back to a page from the cache: its forms may be sent again.
  window.addEventListener("pageshow", function () {
    document.querySelectorAll("form[data-sending]").forEach(function (form) {
      delete form.dataset.sending;
      form.removeAttribute("aria-busy");
    });
  });
  // After a refused form, take the keyboard to the first field it names,
  // or else to its problem.
  var field = document.querySelector("main [aria-invalid=true]");
  var problem = document.querySelector("main .problem[role=alert], main .refusal[role=alert]");
  if (field) {
    field.focus();
  } else if (problem) {
    problem.setAttribute("tabindex", "-1");
    problem.focus();
  }
})();
