// bext-scheduler status page: the buttons and the refresh. The page reads
// without this script; it adds what needs one.
//
// The API token is asked for once, kept in this tab's sessionStorage (gone
// when the tab closes, never sent to another origin, never in a URL) and
// sent only as "Authorization: Bearer" to this node's API. A refused token
// is forgotten, so the next click asks again.
(function () {
	"use strict";
	document.documentElement.classList.add("js");
	var KEY = "bext-scheduler-api-token";
	var refreshMs = (parseInt(document.body.dataset.refresh, 10) || 5) * 1000;
	var main = document.getElementById("main");
	var msg = document.getElementById("msg");
	var form = document.getElementById("token-form");
	var input = document.getElementById("token");
	var setNote = document.getElementById("token-set");
	var pending = null; // the action waiting for the token
	var inflight = false;

	function token() {
		try { return sessionStorage.getItem(KEY) || ""; } catch (e) { return memToken; }
	}
	var memToken = "";
	function setToken(t) {
		memToken = t;
		try { if (t) { sessionStorage.setItem(KEY, t); } else { sessionStorage.removeItem(KEY); } } catch (e) { /* memory only */ }
		showToken();
	}
	function showToken() {
		if (!form) { return; }
		var has = token() !== "";
		setNote.hidden = !has;
		if (has) { form.hidden = true; }
	}
	function say(text, kind) {
		msg.textContent = text; // text, never markup: the answer may carry an id
		msg.className = "msg " + (kind || "");
	}

	function askToken(action, id) {
		pending = { action: action, id: id };
		form.hidden = false;
		input.value = "";
		input.focus();
		say("Enter the API token ([http] token) to " + action + " " + id + ".", "");
	}

	function send(action, id) {
		var buttons = document.querySelectorAll("button[data-action]");
		buttons.forEach(function (b) { b.disabled = true; });
		say(action + " " + id + "…", "");
		var url = "/api/v1/schedules/" + encodeURIComponent(id) + "/" + action;
		fetch(url, {
			method: "POST",
			headers: { "Authorization": "Bearer " + token(), "Content-Type": "application/json" },
			body: action === "pause" ? JSON.stringify({ note: "paused from the status page" }) : "",
			cache: "no-store",
			credentials: "same-origin"
		}).then(function (r) {
			return r.text().then(function (text) {
				var body = null;
				try { body = JSON.parse(text); } catch (e) { /* not JSON: show the text */ }
				return { status: r.status, ok: r.ok, body: body, text: text };
			});
		}).then(function (a) {
			if (!a.ok) {
				if (a.status === 401) { setToken(""); }
				var why = a.body && a.body.error ? a.body.error : a.text;
				say(action + " " + id + " refused (HTTP " + a.status + "): " + why, "error");
				return;
			}
			say(action + " " + id + ": " + describe(action, a.body), "ok");
			refresh();
		}).catch(function (e) {
			say(action + " " + id + " failed: " + e.message, "error");
		}).finally(function () {
			document.querySelectorAll("button[data-action]").forEach(function (b) { b.disabled = false; });
		});
	}

	function describe(action, b) {
		if (!b) { return "done"; }
		if (action === "trigger") {
			return b.accepted ? "accepted by node " + b.node + "; its run shows on the next refresh" : "queued; no node took it yet";
		}
		return b.paused ? "paused" + (b.note ? " (" + b.note + ")" : "") : "resumed";
	}

	document.addEventListener("click", function (ev) {
		var b = ev.target.closest("button[data-action]");
		if (b) {
			ev.preventDefault();
			if (token() === "") { askToken(b.dataset.action, b.dataset.id); } else { send(b.dataset.action, b.dataset.id); }
			return;
		}
		if (ev.target.id === "forget") { setToken(""); say("Token forgotten.", ""); }
	});
	if (form) {
		form.addEventListener("submit", function (ev) {
			ev.preventDefault();
			var t = input.value.trim();
			input.value = "";
			if (!t) { return; }
			setToken(t);
			if (pending) { var p = pending; pending = null; send(p.action, p.id); }
		});
	}
	showToken();

	// Filter: the list's rows whose text holds every word typed (any case),
	// in the page, with no request. The box lives outside <main>, so a
	// refresh keeps it, and the new rows are filtered before they paint.
	// Without this script the box is hidden and every row shows.
	var filter = document.getElementById("filter");
	var filterCount = document.getElementById("filter-count");
	function rowText(r) {
		if (r.bextText === undefined) {
			var parts = [r.dataset.id];
			r.querySelectorAll("td:not(.act)").forEach(function (td) { parts.push(td.textContent); });
			r.bextText = parts.join(" ").toLowerCase();
		}
		return r.bextText;
	}
	function applyFilter() {
		if (!filter) { return; }
		var words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
		var rows = main.querySelectorAll("tr.sched");
		var shown = 0;
		rows.forEach(function (r) {
			var text = words.length ? rowText(r) : "";
			var ok = words.every(function (w) { return text.indexOf(w) >= 0; });
			if (r.hidden === ok) { r.hidden = !ok; }
			if (ok) { shown++; }
		});
		filterCount.textContent = words.length ? shown + " of " + rows.length : "";
	}
	if (filter) {
		filter.addEventListener("input", applyFilter);
		filter.addEventListener("keydown", function (ev) {
			if (ev.key === "Escape") { filter.value = ""; applyFilter(); }
		});
		document.addEventListener("keydown", function (ev) {
			var t = ev.target.tagName;
			if (ev.key === "/" && t !== "INPUT" && t !== "TEXTAREA" && !ev.ctrlKey && !ev.metaKey && !ev.altKey) {
				ev.preventDefault();
				filter.focus();
			}
		});
		applyFilter(); // a value the browser restored on reload
	}

	// Refresh: fetch this page's <main> and swap it in, keeping the scroll
	// position, the open output tails, and the operator's text selection
	// (a round is skipped while text is selected in the page).
	function refresh() {
		if (inflight) { return; }
		inflight = true;
		var url = location.pathname + "?part=main";
		fetch(url, { cache: "no-store", credentials: "same-origin" }).then(function (r) {
			return r.text().then(function (html) { return { r: r, html: html }; });
		}).then(function (x) {
			var ct = x.r.headers.get("Content-Type") || "";
			if (ct.indexOf("text/html") !== 0) { throw new Error("HTTP " + x.r.status); }
			var sel = window.getSelection();
			if (sel && !sel.isCollapsed && main.contains(sel.anchorNode)) { return; }
			var open = {};
			main.querySelectorAll("details[open]").forEach(function (d) { open[d.dataset.key] = true; });
			var y = window.scrollY;
			main.innerHTML = x.html; // our own template's output: escaped markup, no script
			applyFilter();
			main.querySelectorAll("details").forEach(function (d) { if (open[d.dataset.key]) { d.open = true; } });
			window.scrollTo(window.scrollX, y);
			var u = document.querySelector("#updated time");
			var now = new Date().toISOString().replace(/\.\d+Z$/, "Z");
			if (u) { u.textContent = now; u.setAttribute("datetime", now); }
			document.getElementById("updated").classList.remove("stale");
		}).catch(function (e) {
			var u = document.getElementById("updated");
			u.classList.add("stale");
			u.title = "refresh failed: " + e.message;
		}).finally(function () { inflight = false; });
	}
	setInterval(function () { if (!document.hidden) { refresh(); } }, refreshMs);
	window.bextRefresh = refresh; // for tests and the console
})();
