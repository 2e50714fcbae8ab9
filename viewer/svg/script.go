package svg

const style = `
text { font-family: Verdana, sans-serif; font-size: 12px; fill: rgb(0,0,0); }
#title { font-size: 17px; }
#search, #unzoom { cursor: pointer; }
#search:hover, #unzoom:hover { fill: rgb(0,0,200); }
#unzoom.hide { display: none; }
g.f { cursor: pointer; }
g.f:hover rect { stroke: rgb(0,0,0); stroke-width: 0.5; }
g.f.hide { display: none; }
g.f.parent { opacity: 0.5; }
g.f text { pointer-events: none; }
`

// script is the picture's behaviour. Frames carry data-x and data-w, their
// left edge and width in weight units; the first line of a frame's title is
// its label. Globals search(re), resetSearch(), zoom(g) and unzoom() are
// what a person's clicks call, and what the browser test drives.
const script = `
"use strict";
var svgroot = document.getElementById("flame");
var details = document.getElementById("details");
var matchedtxt = document.getElementById("matched");
var unzoombtn = document.getElementById("unzoom");
var searchbtn = document.getElementById("search");
var TOTAL = +svgroot.getAttribute("data-total");
var UNIT = svgroot.getAttribute("data-unit");
var WIDTH = +svgroot.getAttribute("data-width");
var XPAD = +svgroot.getAttribute("data-xpad");
var FONT = 12, FONTW = 0.59;
var frames = Array.prototype.slice.call(document.querySelectorAll("#frames g.f"));
var zoomed = null, searching = null;
unzoombtn.classList.add("hide");

function label(g) { return g.querySelector("title").textContent.split("\n")[0]; }
function info(g) { var p = g.querySelector("title").textContent.split("\n"); return p[0] + " (" + p.slice(1).join("; ") + ")"; }
function len(s) { return Array.from(s).length; }
// parse splits func@file@STUCK|LEAK from the right, as flame.ParseLabel.
function parse(s) {
	var at = s.lastIndexOf("@");
	if (at < 0) return null;
	var sets = s.slice(at + 1);
	if (!/^[0-9\/+-]*\|[0-9\/+-]*$/.test(sets)) return null;
	var frame = s.slice(0, at), at2 = frame.lastIndexOf("@");
	if (at2 < 0) return null;
	var bar = sets.indexOf("|");
	return {fn: frame.slice(0, at2), file: frame.slice(at2 + 1), stuck: sets.slice(0, bar), leak: sets.slice(bar + 1)};
}
// fit is svg.Fit: shorten in the middle so the function and rank sets stay.
function fit(s, w) {
	var n = Math.floor((w - 3) / (FONT * FONTW));
	if (n < 3) return "";
	if (len(s) <= n) return s;
	var l = parse(s);
	if (l) {
		var base = l.file, i = base.lastIndexOf("/");
		if (i >= 0) base = "\u2026/" + base.slice(i + 1);
		var setss = ["@" + l.stuck + "|" + l.leak, "@" + l.stuck + "|\u2026"];
		for (var j = 0; j < setss.length; j++) {
			var sets = setss[j];
			var cs = [l.fn + "@" + base + sets, l.fn + "@\u2026" + sets];
			for (var c = 0; c < cs.length; c++) if (len(cs[c]) <= n) return cs[c];
			var k = n - len(sets) - 1;
			if (k >= 3) return Array.from(l.fn).slice(0, k).join("") + "\u2026" + sets;
		}
	}
	return Array.from(s).slice(0, n - 2).join("") + "..";
}
function place(g, x, w) {
	var r = g.querySelector("rect"), t = g.querySelector("text");
	r.setAttribute("x", x.toFixed(2));
	r.setAttribute("width", w.toFixed(2));
	t.setAttribute("x", (x + 3).toFixed(2));
	t.textContent = fit(label(g), w);
}
function zoom(node) {
	var nx = +node.getAttribute("data-x"), nw = +node.getAttribute("data-w");
	var ny = +node.querySelector("rect").getAttribute("y");
	var ratio = (WIDTH - 2 * XPAD) / nw;
	zoomed = node;
	unzoombtn.classList.remove("hide");
	frames.forEach(function (g) {
		var x = +g.getAttribute("data-x"), w = +g.getAttribute("data-w");
		var y = +g.querySelector("rect").getAttribute("y");
		g.classList.remove("parent");
		if (y > ny) { // below: an ancestor spans the whole picture
			if (x <= nx && x + w >= nx + nw) {
				g.classList.remove("hide");
				g.classList.add("parent");
				place(g, XPAD, WIDTH - 2 * XPAD);
			} else {
				g.classList.add("hide");
			}
		} else if (x >= nx && x + w <= nx + nw) {
			g.classList.remove("hide");
			place(g, XPAD + (x - nx) * ratio, w * ratio);
		} else {
			g.classList.add("hide");
		}
	});
	if (searching !== null) search(searching);
}
function unzoom() {
	var scale = (WIDTH - 2 * XPAD) / TOTAL;
	zoomed = null;
	unzoombtn.classList.add("hide");
	frames.forEach(function (g) {
		g.classList.remove("hide");
		g.classList.remove("parent");
		place(g, XPAD + (+g.getAttribute("data-x")) * scale, (+g.getAttribute("data-w")) * scale);
	});
	if (searching !== null) search(searching);
}
function search(term) {
	var re;
	try { re = new RegExp(term); } catch (e) { matchedtxt.textContent = "Bad regex: " + e.message; return -1; }
	resetSearch();
	searching = term;
	var spans = [], n = 0;
	frames.forEach(function (g) {
		if (!re.test(label(g))) return;
		var r = g.querySelector("rect");
		r.setAttribute("data-fill", r.getAttribute("fill"));
		r.setAttribute("fill", "rgb(230,0,230)");
		g.classList.add("match");
		spans.push([+g.getAttribute("data-x"), +g.getAttribute("data-x") + (+g.getAttribute("data-w"))]);
		n++;
	});
	spans.sort(function (a, b) { return a[0] - b[0]; });
	var covered = 0, end = -1;
	spans.forEach(function (s) {
		if (s[0] >= end) { covered += s[1] - s[0]; end = s[1]; }
		else if (s[1] > end) { covered += s[1] - end; end = s[1]; }
	});
	var share = TOTAL > 0 ? 100 * covered / TOTAL : 0;
	matchedtxt.textContent = "Matched: " + share.toFixed(1) + "% (" + n + (n === 1 ? " frame)" : " frames)");
	svgroot.setAttribute("data-matched", share.toFixed(3));
	searchbtn.textContent = "Reset Search";
	return share;
}
function resetSearch() {
	searching = null;
	frames.forEach(function (g) {
		if (!g.classList.contains("match")) return;
		var r = g.querySelector("rect");
		r.setAttribute("fill", r.getAttribute("data-fill"));
		r.removeAttribute("data-fill");
		g.classList.remove("match");
	});
	matchedtxt.textContent = "";
	svgroot.removeAttribute("data-matched");
	searchbtn.textContent = "Search";
}
function frameOf(e) { return e.target && e.target.closest ? e.target.closest("g.f") : null; }
svgroot.addEventListener("mouseover", function (e) {
	var g = frameOf(e);
	if (g) details.textContent = info(g);
});
svgroot.addEventListener("mouseout", function (e) {
	if (frameOf(e)) details.textContent = " ";
});
svgroot.addEventListener("click", function (e) {
	var g = frameOf(e);
	if (g) { zoom(g); return; }
	if (e.target === unzoombtn) { unzoom(); return; }
	if (e.target === searchbtn) {
		if (searching !== null) { resetSearch(); return; }
		var term = prompt("Search for (regular expression):", "");
		if (term) search(term);
	}
});
window.addEventListener("keydown", function (e) {
	if (e.keyCode === 114 || ((e.ctrlKey || e.metaKey) && e.keyCode === 70)) {
		e.preventDefault();
		var term = prompt("Search for (regular expression):", searching || "");
		if (term) search(term);
	} else if (e.key === "Escape") {
		resetSearch();
	}
});
(function () {
	var q = new URLSearchParams(document.location.search);
	if (q.get("s")) search(q.get("s"));
})();
`
