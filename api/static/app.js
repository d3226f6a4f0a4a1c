/* The dashboard's progressive enhancement: live runs over server-sent events, forms that
   submit without leaving the page, the definition editor's validation as you type, the
   schedule preview, confirmations and the copy button. Every page works without it. */
(function () {
  "use strict";

  function csrfToken() {
    var meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.getAttribute("content") : "";
  }

  function debounce(fn, ms) {
    var timer = null;
    return function () {
      var args = arguments;
      clearTimeout(timer);
      timer = setTimeout(function () { fn.apply(null, args); }, ms);
    };
  }

  function post(url, form) {
    return fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Accept": "application/json", "X-CSRF-Token": csrfToken() },
      body: new URLSearchParams(new FormData(form))
    }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (data) {
        return { ok: response.ok, data: data };
      });
    });
  }

  // Confirmation before destructive actions (forms and individual buttons).
  document.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-confirm]");
    if (button && !window.confirm(button.getAttribute("data-confirm"))) {
      event.preventDefault();
    }
  });

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form.hasAttribute("data-confirm") && !window.confirm(form.getAttribute("data-confirm"))) {
      event.preventDefault();
      return;
    }
    if (form.getAttribute("data-async") !== "true") { return; }
    event.preventDefault();
    var status = form.querySelector(".async-status");
    var buttons = form.querySelectorAll("button");
    buttons.forEach(function (b) { b.disabled = true; });
    if (status) { status.textContent = "Working…"; status.className = "async-status"; }
    post(form.action, form).then(function (result) {
      if (status && result.ok && result.data.runId && form.hasAttribute("data-follow-run")) {
        // A run was queued: its line follows the run's row in the live table until it ends.
        status.setAttribute("data-run", result.data.runId);
        status.textContent = "Queued…";
        status.className = "async-status";
        followRuns();
      } else if (status) {
        status.removeAttribute("data-run");
        status.textContent = result.ok ? "Done" : (result.data.error || "Failed");
        status.className = "async-status " + (result.ok ? "ok" : "error");
      }
      if (result.ok) { form.reset(); }
    }).catch(function () {
      if (status) { status.textContent = "Network error"; status.className = "async-status error"; }
    }).then(function () {
      buttons.forEach(function (b) { b.disabled = false; });
    });
  });

  // A started run's status line says what its row in the runs table says: never "Done" while
  // the run is still going, never green when it failed.
  var RUN_WORDS = {
    queued: ["Queued…", ""], starting: ["Starting…", ""], running: ["Running…", ""],
    completed: ["Completed", "ok"], paused: ["Paused at a gate", "warn"],
    failed: ["Failed", "error"], cancelled: ["Cancelled", "warn"]
  };
  function followRuns() {
    document.querySelectorAll(".async-status[data-run]").forEach(function (status) {
      var row = document.querySelector('#runs tr[data-run="' + status.getAttribute("data-run") + '"]');
      if (!row) { return; }
      var state = row.getAttribute("data-status");
      var words = RUN_WORDS[state] || [state, ""];
      var text = words[0];
      var error = row.querySelector(".error-text");
      if (state === "failed" && error && error.textContent.trim()) { text += ": " + error.textContent.trim(); }
      status.textContent = text;
      status.className = "async-status " + words[1];
    });
  }

  // Live parts of a page: the server sends fresh HTML for each part that changed.
  var live = document.querySelector("[data-live]");
  if (live && window.EventSource) {
    var indicator = document.querySelector("[data-live-state]");
    var source = new EventSource(live.getAttribute("data-live"));
    source.onopen = function () { if (indicator) { indicator.textContent = "live"; indicator.className = "live-dot on"; } };
    source.onerror = function () { if (indicator) { indicator.textContent = "reconnecting"; indicator.className = "live-dot"; } };
    source.onmessage = function (message) {
      var data;
      try { data = JSON.parse(message.data); } catch (e) { return; }
      Object.keys(data).forEach(function (part) {
        var target = document.querySelector('[data-live-part="' + part + '"]');
        if (target && typeof data[part] === "string") { target.innerHTML = data[part]; }
      });
      followRuns();
    };
    window.addEventListener("pagehide", function () { source.close(); });
  }

  // The definition editor: validated on the server with the schema publishing uses.
  var editor = document.querySelector("textarea[data-validate]");
  if (editor) {
    var box = document.getElementById("definition-errors");
    var check = debounce(function () {
      var body = new FormData();
      body.append("definition", editor.value);
      fetch(editor.getAttribute("data-validate"), {
        method: "POST", credentials: "same-origin",
        headers: { "Accept": "application/json", "X-CSRF-Token": csrfToken() },
        body: new URLSearchParams(body)
      }).then(function (r) { return r.json(); }).then(function (data) {
        box.textContent = "";
        var errors = data.errors || [];
        editor.setAttribute("aria-invalid", errors.length ? "true" : "false");
        if (!errors.length) {
          var ok = document.createElement("span");
          ok.className = "ok"; ok.textContent = "Valid team definition.";
          box.appendChild(ok);
        }
        // Errors block publishing; warnings (a provider this server has no key for) do not.
        [[errors, "errors"], [data.warnings || [], "warnings"]].forEach(function (pair) {
          if (!pair[0].length) { return; }
          var list = document.createElement("ul");
          list.className = pair[1];
          pair[0].forEach(function (e) {
            var item = document.createElement("li");
            var path = document.createElement("code");
            path.textContent = e.path;
            item.appendChild(path);
            item.appendChild(document.createTextNode(" " + e.message));
            list.appendChild(item);
          });
          box.appendChild(list);
        });
      }).catch(function () { box.textContent = "Could not check the definition."; });
    }, 300);
    editor.addEventListener("input", check);
    check();
  }

  // A new template's slug follows its name until the person edits the slug (clearing it
  // hands it back to the name).
  function slugify(text) {
    return text.normalize("NFKD").replace(/[\u0300-\u036f]/g, "").toLowerCase()
      .replace(/[^a-z0-9]+/g, "-").replace(/^-+/, "").slice(0, 64).replace(/-+$/, "");
  }
  var slug = document.querySelector("input[data-slug]");
  var slugSource = document.querySelector("input[data-slug-source]");
  if (slug && slugSource) {
    var follows = slug.value === "" || slug.value === slugify(slugSource.value);
    slug.addEventListener("input", function () { follows = slug.value === ""; });
    slugSource.addEventListener("input", function () {
      if (follows) { slug.value = slugify(slugSource.value); }
    });
  }

  // The schedule editor's next fire times, computed by the server in the chosen zone.
  var scheduleForm = document.getElementById("schedule-form");
  if (scheduleForm) {
    var cron = document.getElementById("cron");
    var zone = document.getElementById("timezone");
    var listEl = document.getElementById("fire-times");
    var errorEl = document.getElementById("preview-error");
    var preview = debounce(function () {
      var url = scheduleForm.getAttribute("data-preview") + "?cron=" + encodeURIComponent(cron.value) +
        "&timezone=" + encodeURIComponent(zone.value);
      fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
        .then(function (r) { return r.json(); }).then(function (data) {
          listEl.textContent = "";  // fire times of an earlier value are no answer for this one
          if (data.error) { errorEl.textContent = data.error; errorEl.hidden = false; return; }
          errorEl.hidden = true;
          (data.fireTimes || []).forEach(function (t) {
            var item = document.createElement("li");
            var time = document.createElement("time");
            time.textContent = t.local;
            item.appendChild(time);
            item.appendChild(document.createTextNode(" " + t.zoneName + " (UTC" + t.offset + ") "));
            var utc = document.createElement("small");
            utc.className = "muted"; utc.textContent = t.utc;
            item.appendChild(utc);
            listEl.appendChild(item);
          });
        }).catch(function () { errorEl.textContent = "Could not compute the fire times."; errorEl.hidden = false; });
    }, 250);
    cron.addEventListener("input", preview);
    zone.addEventListener("input", preview);
    zone.addEventListener("change", preview);
    // Suggest the browser's own zone when it is not the one in the field.
    var hint = document.getElementById("zone-hint");
    var mine = window.Intl ? Intl.DateTimeFormat().resolvedOptions().timeZone : "";
    var known = mine && document.querySelector('#zones option[value="' + mine + '"]');
    if (hint && known && zone.value !== mine) {
      var use = hint.querySelector("[data-use-zone]");
      use.textContent = "Use your time zone, " + mine;
      hint.hidden = false;
      use.addEventListener("click", function () {
        zone.value = mine;
        hint.hidden = true;
        preview();
      });
    }
  }

  // Copy a freshly created key to the clipboard.
  document.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-copy]");
    if (!button) { return; }
    var source = document.querySelector(button.getAttribute("data-copy"));
    var status = button.parentElement.querySelector(".copy-status");
    var text = source ? source.textContent : "";
    function copied(ok) { if (status) { status.textContent = ok ? "Copied" : "Select the key and copy it"; } }
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(function () { copied(true); }, function () { copied(false); });
    } else {
      copied(false);
    }
  });
})();
