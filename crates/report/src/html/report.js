// tcpstall report: draws the charts as SVG from the inline JSON (#data). Hand-written, no
// library, no network. When it finishes it appends #report-ok (the headless test waits for it);
// an error appends #report-error with the message.
"use strict";
(function () {
  var NS = "http://www.w3.org/2000/svg";
  function fail(msg) {
    var e = document.createElement("div");
    e.id = "report-error";
    e.className = "error";
    e.textContent = "report script error: " + msg;
    document.body.appendChild(e);
  }
  window.addEventListener("error", function (ev) { fail(ev.message); });
  var D = JSON.parse(document.getElementById("data").textContent);

  function el(tag, attrs, parent, text) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function clear(svg) { while (svg.firstChild) svg.removeChild(svg.firstChild); }
  function color(i, n) { return "hsl(" + ((i * 137.508) % 360).toFixed(1) + "," + (n > 12 ? 65 : 70) + "%," + (i % 2 ? 38 : 48) + "%)"; }
  function fmtUs(us) {
    if (us >= 1e6) return +(us / 1e6).toPrecision(3) + " s";
    if (us >= 1e3) return +(us / 1e3).toPrecision(3) + " ms";
    if (us >= 1) return +us.toPrecision(3) + " µs";
    return +(us * 1e3).toPrecision(3) + " ns";
  }
  function fmtNum(v) {
    var a = Math.abs(v);
    if (a >= 1e9) return +(v / 1e9).toPrecision(3) + "G";
    if (a >= 1e6) return +(v / 1e6).toPrecision(3) + "M";
    if (a >= 1e4) return +(v / 1e3).toPrecision(3) + "k";
    return +v.toPrecision(4) + "";
  }
  function lin(d0, d1, r0, r1) {
    var k = (r1 - r0) / ((d1 - d0) || 1);
    var f = function (v) { return r0 + (v - d0) * k; };
    f.inv = function (p) { return d0 + (p - r0) / k; };
    return f;
  }
  function niceTicks(a, b, n) {
    var span = b - a; if (!(span > 0)) return [a];
    var step = Math.pow(10, Math.floor(Math.log10(span / n)));
    var err = span / n / step;
    if (err >= 7.5) step *= 10; else if (err >= 3.5) step *= 5; else if (err >= 1.5) step *= 2;
    var t = [], v = Math.ceil(a / step) * step;
    for (; v <= b + step * 1e-9; v += step) t.push(+v.toPrecision(12));
    return t;
  }
  // A frame with axes: x and y are scales over the plot area; returns the plot group.
  function frame(svg, W, H, m, xs, ys, xt, yt, xl, yl, xfmt, yfmt) {
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    svg.setAttribute("height", H);
    var g = el("g", { "class": "axis" }, svg);
    yt.forEach(function (v) {
      var y = ys(v);
      el("line", { x1: m.l, x2: W - m.r, y1: y, y2: y, "class": "grid" }, g);
      el("text", { x: m.l - 5, y: y + 4, "text-anchor": "end" }, g, yfmt(v));
    });
    xt.forEach(function (v) {
      var x = xs(v);
      el("line", { x1: x, x2: x, y1: m.t, y2: H - m.b, "class": "grid" }, g);
      el("text", { x: x, y: H - m.b + 14, "text-anchor": "middle" }, g, xfmt(v));
    });
    el("path", { d: "M" + m.l + "," + m.t + "V" + (H - m.b) + "H" + (W - m.r), fill: "none" }, g);
    el("text", { x: (m.l + W - m.r) / 2, y: H - 6, "text-anchor": "middle", "class": "title" }, g, xl);
    el("text", { x: 14, y: (m.t + H - m.b) / 2, "text-anchor": "middle", "class": "title", transform: "rotate(-90 14 " + (m.t + H - m.b) / 2 + ")" }, g, yl);
    return el("g", {}, svg);
  }
  function logTicks(lo, hi) {
    var t = [];
    for (var e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
      var v = Math.pow(10, e);
      if (v >= lo * 0.999 && v <= hi * 1.001) t.push(v);
    }
    return t;
  }

  var S = D.strategies || [];
  var counts = { cdf: 0, marks: 0, hist: 0, wire: 0, ladder: 0, graphs: 0, errbars: 0 };

  // --- advise's ranking: p50 and p99 with their 95% intervals, one line per candidate
  function drawErrbars() {
    var svg = document.getElementById("errbars");
    if (!svg || !D.ranking) return;
    clear(svg);
    var R = D.ranking.rows;
    var lo = Infinity, hi = 0;
    R.forEach(function (r) {
      [r.p50_us, r.p99_us].forEach(function (q) {
        q.forEach(function (v) { if (v > 0) { lo = Math.min(lo, v); hi = Math.max(hi, v); } });
      });
    });
    if (!(hi > 0)) { svg.setAttribute("height", 30); el("text", { x: 10, y: 20 }, svg, "no latency figures"); return; }
    lo = Math.pow(10, Math.floor(Math.log10(lo))); hi = Math.pow(10, Math.ceil(Math.log10(hi * 1.0001)));
    var row = 22, W = 1000, m = { l: 300, r: 20, t: 10, b: 40 }, H = m.t + m.b + row * R.length;
    var lx = lin(Math.log10(lo), Math.log10(hi), m.l, W - m.r);
    var xs = function (v) { return lx(Math.log10(Math.max(v, lo))); };
    var ys = function (i) { return m.t + row * (i + 0.5); };
    var g = frame(svg, W, H, m, xs, function (v) { return v; }, logTicks(lo, hi), [], "latency (log scale)", "", fmtUs, String);
    R.forEach(function (r, i) {
      var y = ys(i);
      el("text", { x: m.l - 8, y: y + 4, "text-anchor": "end" }, g, r.rank + ". " + r.label + (r.stalls ? "  (" + r.stalls + " stalls)" : ""));
      [["p50", r.p50_us, -4], ["p99", r.p99_us, 4]].forEach(function (q) {
        var v = q[1], yy = y + q[2];
        if (!(v[0] > 0)) return;
        var bar = el("line", { x1: xs(v[1]), x2: xs(v[2]), y1: yy, y2: yy, "class": "errbar " + q[0], "data-rank": i, "data-q": q[0], "data-est": v[0], "data-lo": v[1], "data-hi": v[2] }, g);
        el("title", {}, bar, r.label + " " + q[0] + " " + fmtUs(v[0]) + " [" + fmtUs(v[1]) + " - " + fmtUs(v[2]) + "]");
        [v[1], v[2]].forEach(function (e) { el("line", { x1: xs(e), x2: xs(e), y1: yy - 3, y2: yy + 3, "class": "errbar " + q[0] }, g); });
        if (q[0] === "p50") el("circle", { cx: xs(v[0]), cy: yy, r: 3.5, "class": "est p50" }, g);
        else el("rect", { x: xs(v[0]) - 3.5, y: yy - 3.5, width: 7, height: 7, "class": "est p99" }, g);
        counts.errbars++;
      });
    });
  }

  // --- latency CDF (x: latency, log; y: nines of the fraction at or below)
  function nines(q, cap) { return q >= 1 ? cap : Math.min(cap, -Math.log10(1 - q)); }
  function drawCdf() {
    var svg = document.getElementById("cdf");
    if (!svg) return;
    clear(svg);
    var rows = S.map(function (s, i) { return [s, i]; }).filter(function (p) { return p[0].dist; });
    if (!rows.length) { svg.setAttribute("height", 30); el("text", { x: 10, y: 20 }, svg, "no latency samples"); return; }
    var lo = Infinity, hi = 0, maxN = 1;
    rows.forEach(function (p) {
      var c = p[0].dist.cdf;
      lo = Math.min(lo, c[0][0]); hi = Math.max(hi, c[c.length - 1][0]); maxN = Math.max(maxN, p[0].dist.count);
    });
    lo = Math.pow(10, Math.floor(Math.log10(lo))); hi = Math.pow(10, Math.ceil(Math.log10(hi * 1.0001)));
    var cap = Math.max(1, Math.ceil(Math.log10(maxN)));
    var W = 1000, H = 380, m = { l: 60, r: 20, t: 12, b: 40 };
    var lx = lin(Math.log10(lo), Math.log10(hi), m.l, W - m.r);
    var xs = function (v) { return lx(Math.log10(Math.max(v, lo))); };
    var ys = lin(0, cap, H - m.b, m.t);
    var yt = [0, Math.log10(2)]; for (var k = 1; k <= cap; k++) yt.push(k);
    var pct = function (n) { var q = 1 - Math.pow(10, -n); return +(q * 100).toPrecision(Math.max(2, Math.round(n) + 1)) + "%"; };
    var g = frame(svg, W, H, m, xs, ys, logTicks(lo, hi), yt, "latency (log scale)", "samples at or below", fmtUs, function (n) { return n === 0 ? "0%" : pct(n); });
    rows.forEach(function (p) {
      var s = p[0], i = p[1], c = s.dist.cdf, d = "", prev = 0;
      c.forEach(function (pt, j) {
        var x = xs(pt[0]).toFixed(1);
        d += (j ? "L" : "M") + x + "," + ys(nines(prev, cap)).toFixed(1) + "L" + x + "," + ys(nines(pt[1], cap)).toFixed(1);
        prev = pt[1];
      });
      var path = el("path", { d: d, "class": "cdf", "data-row": i, stroke: color(i, S.length) }, g);
      el("title", {}, path, s.label);
      counts.cdf++;
      [["p50", 0.5], ["p99", 0.99], ["p999", 0.999]].forEach(function (q) {
        var v = s.latency_us[q[0]];
        if (!(v > 0) || nines(q[1], cap) > cap) return;
        var c2 = el("circle", { cx: xs(v), cy: ys(nines(q[1], cap)), r: 3, fill: color(i, S.length), "class": "pmark", "data-row": i, "data-p": q[0], "data-v": v }, g);
        el("title", {}, c2, s.label + " " + q[0] + " = " + fmtUs(v));
        counts.marks++;
      });
    });
    var leg = document.getElementById("legend");
    rows.forEach(function (p) {
      var sp = document.createElement("span");
      sp.setAttribute("data-row", p[1]);
      sp.innerHTML = "<i style=\"background:" + color(p[1], S.length) + "\"></i>";
      sp.appendChild(document.createTextNode(p[0].label));
      leg.appendChild(sp);
    });
  }
  function highlight(i) {
    document.querySelectorAll("path.cdf").forEach(function (p) {
      var on = i !== null && p.getAttribute("data-row") === String(i);
      p.classList.toggle("hl", on);
      p.classList.toggle("dim", i !== null && !on);
    });
    document.querySelectorAll("#strategies tbody tr").forEach(function (tr) {
      tr.classList.toggle("hl", i !== null && tr.getAttribute("data-row") === String(i));
    });
  }
  function hover(sel) {
    document.querySelectorAll(sel).forEach(function (n) {
      n.addEventListener("mouseenter", function () { highlight(n.getAttribute("data-row")); });
      n.addEventListener("mouseleave", function () { highlight(null); });
    });
  }

  // --- histogram of the chosen strategy
  function drawHist(i) {
    var svg = document.getElementById("hist");
    if (!svg) return;
    clear(svg);
    counts.hist = 0;
    var s = S[i];
    if (!s || !s.dist) { svg.setAttribute("height", 30); el("text", { x: 10, y: 20 }, svg, "no latency samples"); return; }
    var h = s.dist.hist, lo = h[0][0], hi = h[h.length - 1][1], top = 0;
    h.forEach(function (b) { top = Math.max(top, b[2]); });
    lo = Math.pow(10, Math.floor(Math.log10(lo))); hi = Math.pow(10, Math.ceil(Math.log10(hi)));
    var W = 1000, H = 260, m = { l: 60, r: 20, t: 12, b: 40 };
    var lx = lin(Math.log10(lo), Math.log10(hi), m.l, W - m.r);
    var xs = function (v) { return lx(Math.log10(v)); };
    var ys = lin(0, top * 1.05, H - m.b, m.t);
    var g = frame(svg, W, H, m, xs, ys, logTicks(lo, hi), niceTicks(0, top * 1.05, 5), "latency (log scale, 20 bins per decade)", "samples", fmtUs, fmtNum);
    h.forEach(function (b) {
      var r = el("rect", { x: xs(b[0]), width: Math.max(1, xs(b[1]) - xs(b[0]) - 1), y: ys(b[2]), height: ys(0) - ys(b[2]), fill: color(i, S.length), "class": "bin", "data-n": b[2] }, g);
      el("title", {}, r, fmtUs(b[0]) + " – " + fmtUs(b[1]) + ": " + b[2] + " samples");
      counts.hist++;
    });
    [["p50", "p50"], ["p99", "p99"], ["p999", "p99.9"]].forEach(function (q) {
      var v = s.latency_us[q[0]];
      if (!(v > 0)) return;
      var x = xs(v);
      el("line", { x1: x, x2: x, y1: m.t, y2: H - m.b, stroke: "#e4572e", "stroke-dasharray": "4 3" }, g);
      el("text", { x: x + 3, y: m.t + 12 + (q[0] === "p99" ? 12 : q[0] === "p999" ? 24 : 0), fill: "#b03a12" }, g, q[1] + " " + fmtUs(v));
    });
  }
  function setupChosen() {
    var sel = document.getElementById("chosen");
    if (!sel) return;
    S.forEach(function (s, i) {
      if (!s.dist) return;
      var o = document.createElement("option");
      o.value = i; o.textContent = s.label;
      sel.appendChild(o);
    });
    if (D.chosen !== null) sel.value = D.chosen;
    document.getElementById("chosen-why").textContent = "(" + D.chosen_why + ")";
    sel.addEventListener("change", function () { drawHist(+sel.value); });
    if (D.chosen !== null) drawHist(D.chosen);
  }

  // --- wire cost bars
  function drawWire() {
    var svg = document.getElementById("wirebars");
    if (!svg || !S.length) return;
    clear(svg);
    var bars = [["client data", "client", "data_segs_out", "#1a4fb4"], ["client non-data", "client", "non_data_segs_out", "#7aa2e8"],
      ["server data", "server", "data_segs_out", "#2a9d3a"], ["server non-data", "server", "non_data_segs_out", "#8fd19e"]];
    var bh = 5, gh = bars.length * bh + 8, W = 1000, m = { t: 26, b: 30 }, lw = 250, split = 640;
    var H = m.t + m.b + S.length * gh;
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    svg.setAttribute("height", H);
    var segMax = 1, byteMax = 1;
    S.forEach(function (s) {
      bars.forEach(function (b) { segMax = Math.max(segMax, s.wire[b[1]][b[2]]); });
      byteMax = Math.max(byteMax, s.bytes_per_msg[0], s.bytes_per_msg[1]);
    });
    var xs = lin(0, segMax, lw, split - 40), xb = lin(0, byteMax, split + 10, W - 20);
    el("text", { x: lw, y: 14, "class": "title" }, svg, "segments in the measured rounds");
    el("text", { x: split + 10, y: 14, "class": "title" }, svg, "wire bytes per round");
    bars.forEach(function (b, k) {
      el("rect", { x: lw + 140 + k * 125, y: H - 18, width: 10, height: 8, fill: b[3] }, svg);
      el("text", { x: lw + 154 + k * 125, y: H - 10 }, svg, b[0]);
    });
    S.forEach(function (s, i) {
      var y0 = m.t + i * gh;
      el("text", { x: lw - 6, y: y0 + gh / 2 + 2, "text-anchor": "end", "data-row": i }, svg, s.label.length > 40 ? s.label.slice(0, 39) + "…" : s.label);
      bars.forEach(function (b, k) {
        var v = s.wire[b[1]][b[2]];
        var r = el("rect", { x: lw, y: y0 + k * bh, width: Math.max(0.5, xs(v) - lw), height: bh - 1, fill: b[3], "class": "wbar", "data-row": i, "data-k": b[1] + "." + b[2], "data-v": v }, svg);
        el("title", {}, r, s.label + ": " + b[0] + " segments " + v);
        counts.wire++;
      });
      [0, 1].forEach(function (k) {
        var v = s.bytes_per_msg[k];
        var r = el("rect", { x: split + 10, y: y0 + k * 2 * bh, width: Math.max(0.5, xb(v) - split - 10), height: 2 * bh - 1, fill: bars[k * 2][3], "class": "wbar", "data-row": i, "data-k": (k ? "server" : "client") + ".bytes_per_round", "data-v": v }, svg);
        el("title", {}, r, s.label + ": " + (k ? "server" : "client") + " " + v + " B per round");
        counts.wire++;
      });
    });
  }

  // --- ladder of one stall
  function drawLadder(li) {
    var svg = document.getElementById("ladder");
    if (!svg) return;
    clear(svg);
    counts.ladder = 0;
    var L = D.ladders[li];
    if (!L) {
      svg.setAttribute("height", 40);
      el("text", { x: 10, y: 24 }, svg, D.ladders.length ? "pick a stall with a ladder in the table" : "no ladder: no stall with recorded packets (the packets are needed: see the notes at the top)");
      return;
    }
    var st = D.stalls[L.stall];
    document.getElementById("ladder-title").textContent = "Ladder of stall #" + (L.stall + 1) + ": " + st.cause + ", " + L.length_ms + " ms, " + st.held + " held " + st.bytes_held + " B";
    var end = Math.max(L.length_ms, 0) + L.one_way_ms, pad = Math.max(end * 0.04, 0.05);
    var start = L.captured_at !== null ? -L.one_way_ms : 0;
    var W = 1200, H = Math.max(360, Math.min(1400, 90 + L.arrows.length * 14)), m = { l: 70, r: 20, t: 40, b: 20 };
    var xa = 190, xb = 470;
    var ys = lin(start - pad, end + pad, m.t, H - m.b);
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    svg.setAttribute("height", H);
    var defs = el("defs", {}, svg);
    var mk = el("marker", { id: "ah", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" }, defs);
    el("path", { d: "M0,0L10,5L0,10z", fill: "#333" }, mk);
    var g = el("g", { "class": "axis" }, svg);
    niceTicks(start - pad, end + pad, 10).forEach(function (v) {
      el("line", { x1: m.l, x2: W - m.r, y1: ys(v), y2: ys(v), "class": "grid" }, g);
      el("text", { x: m.l - 6, y: ys(v) + 4, "text-anchor": "end" }, g, v + "");
    });
    el("text", { x: 14, y: H / 2, "class": "title", "text-anchor": "middle", transform: "rotate(-90 14 " + H / 2 + ")" }, g, "ms from the stall's start (t = " + L.t0_ms + " ms)");
    el("text", { x: xa, y: 16, "text-anchor": "middle", "class": "title" }, svg, "A (client)");
    el("text", { x: xb, y: 16, "text-anchor": "middle", "class": "title" }, svg, "B (server)");
    el("line", { x1: xa, x2: xa, y1: m.t - 14, y2: H - m.b, "class": "host" }, svg);
    el("line", { x1: xb, x2: xb, y1: m.t - 14, y2: H - m.b, "class": "host" }, svg);
    el("rect", { x: xa - 40, width: 40, y: ys(0), height: Math.max(1, ys(L.length_ms) - ys(0)), "class": "stallband" }, svg);
    // Labels in a column right of B, each at least one line below the previous, with a leader
    // line to its arrow's head: packets microseconds apart stay readable on a real time axis.
    var ly = m.t - 14;
    L.arrows.forEach(function (a) {
      // Stamped at the sender: the arrow leaves at its time; stamped at the receiver (a
      // capture at the peer): it arrives at its time.
      var atRecv = L.captured_at !== null && L.captured_at !== a.from;
      var x1 = a.from ? xb : xa, x2 = a.from ? xa : xb;
      var y1 = ys(atRecv ? a.t_ms - L.one_way_ms : a.t_ms), y2 = ys(atRecv ? a.t_ms : a.t_ms + L.one_way_ms);
      var ln = el("line", { x1: x1, y1: y1, x2: x2, y2: y2, "class": "arrow" + (a.from ? " b" : "") + (a.release ? " rel" : ""), "marker-end": "url(#ah)", "data-frame": a.frame === null ? "" : a.frame }, svg);
      el("title", {}, ln, (a.frame === null ? "" : "#" + a.frame + " ") + a.label + (a.note ? " — " + a.note : ""));
      counts.ladder++;
      ly = Math.max(ly + 13, (y1 + y2) / 2 + 4);
      el("line", { x1: (x1 + x2) / 2, y1: (y1 + y2) / 2, x2: xb + 14, y2: ly - 4, stroke: "#ccc" }, svg);
      var txt = a.t_ms.toFixed(3) + " ms " + (a.frame === null ? "" : "#" + a.frame + " ") + (a.from ? "B→A " : "A→B ") + a.label + (a.note ? ": " + a.note : "");
      var t = el("text", { x: xb + 16, y: ly, "class": a.release ? "relnote" : "" }, svg, txt.length > 95 ? txt.slice(0, 94) + "…" : txt);
      el("title", {}, t, txt);
    });
    if (ly + 20 > H) { H = ly + 20; svg.setAttribute("viewBox", "0 0 " + W + " " + H); svg.setAttribute("height", H); }
    L.marks.forEach(function (mk2) {
      var x = mk2[1] ? xb : xa;
      el("circle", { cx: x, cy: ys(mk2[0]), r: 3.5, "class": "mark" }, svg);
      var mt = el("text", { x: mk2[1] ? x - 8 : x + 8, y: ys(mk2[0]) - 4, "text-anchor": mk2[1] ? "end" : "start", "class": "mark" }, svg, mk2[2]);
      el("title", {}, mt, mk2[0].toFixed(3) + " ms: " + mk2[2]);
    });
    var note = "released by: " + L.release + (L.cut ? "; " + L.cut + " more packets not drawn" : "") + (L.rtt_known ? (L.one_way_ms ? "; arrows slanted by half the path RTT" + (L.captured_at !== null ? ", stamped at " + (L.captured_at ? "B" : "A") : "") : "; no path delay (same host): arrows flat") : "; path RTT unknown: arrows drawn flat");
    el("text", { x: m.l, y: 30 }, svg, note);
    svg.setAttribute("data-arrows", L.arrows.length);
    svg.setAttribute("data-stall", L.stall);
    document.querySelectorAll("#stalltable tr.sel").forEach(function (r) { r.classList.remove("sel"); });
    var tr = document.querySelector("#stalltable tr[data-stall=\"" + L.stall + "\"]");
    if (tr) tr.classList.add("sel");
  }

  // --- time-sequence graphs (zoom: drag; reset: double-click)
  function drawSeries(svg, ts, sr, x0, x1) {
    clear(svg);
    var W = 1000, H = 320, m = { l: 78, r: 20, t: 22, b: 40 };
    var ylo = Infinity, yhi = -Infinity;
    sr.data.forEach(function (p) { if (p[0] >= x0 && p[0] <= x1) { ylo = Math.min(ylo, p[1]); yhi = Math.max(yhi, p[2]); } });
    if (!(yhi > ylo)) { ylo = 0; yhi = Math.max(1, yhi); }
    var ypad = (yhi - ylo) * 0.05;
    var xs = lin(x0, x1, m.l, W - m.r), ys = lin(ylo - ypad, yhi + ypad, H - m.b, m.t);
    var g = frame(svg, W, H, m, xs, ys, niceTicks(x0, x1, 8), niceTicks(ylo - ypad, yhi + ypad, 6), "time (ms from the connection's first packet)", "sequence (bytes)", function (v) { return fmtNum(v); }, fmtNum);
    var clipId = "c" + ts.flow + sr.dir.charCodeAt(0);
    var cp = el("clipPath", { id: clipId }, g);
    el("rect", { x: m.l, y: m.t, width: W - m.l - m.r, height: H - m.t - m.b }, cp);
    var pg = el("g", { "clip-path": "url(#" + clipId + ")" }, g);
    sr.stalls.forEach(function (s) {
      if (s[1] < x0 || s[0] > x1) return;
      var r = el("rect", { x: xs(s[0]), width: Math.max(2, xs(s[1]) - xs(s[0])), y: m.t, height: H - m.t - m.b, "class": "stallband" }, pg);
      el("title", {}, r, s[2] + ": " + (s[1] - s[0]).toFixed(3) + " ms from " + s[0] + " ms");
    });
    var d = "";
    sr.data.forEach(function (p) {
      if (p[0] < x0 || p[0] > x1) return;
      var x = xs(p[0]).toFixed(1);
      // tcptrace's "I": a bar from the first byte to the last, capped at the top.
      var y2 = Math.min(ys(p[2]), ys(p[1]) - 3).toFixed(1);
      d += "M" + x + "," + ys(p[1]).toFixed(1) + "V" + y2 + "m-2.5,0h5";
    });
    el("path", { d: d, "class": "seg" }, pg);
    [["win", sr.win], ["ack", sr.ack]].forEach(function (l) {
      var pts = l[1];
      if (!pts.length) return;
      var dd = "", y = null;
      pts.forEach(function (p) {
        var x = xs(Math.max(x0, Math.min(x1, p[0]))).toFixed(1);
        dd += y === null ? "M" + x + "," + ys(p[1]).toFixed(1) : "H" + x + "V" + ys(p[1]).toFixed(1);
        y = p[1];
      });
      dd += "H" + (W - m.r);
      el("path", { d: dd, "class": l[0] }, pg);
    });
    var lg = el("g", {}, svg);
    [["seg", "data"], ["ack", "ACK"], ["win", "window edge (off the top when it does not limit)"], ["stallband", "stall"]].forEach(function (k, j) {
      var x = W - m.r - 430 + [0, 50, 100, 360][j];
      if (k[0] === "stallband") el("rect", { x: x, y: 4, width: 10, height: 10, "class": k[0] }, lg);
      else el("path", { d: "M" + x + ",9h12", "class": k[0] }, lg);
      el("text", { x: x + 15, y: 13 }, lg, k[1]);
    });
    el("text", { x: m.l + 4, y: 14, "class": "title" }, svg, ts.label + " " + sr.dir + ": " + sr.segments + " data segments" + (sr.downsampled ? " (downsampled: " + D.limits.bins + " time bins)" : ""));
    if (sr.downsampled) el("text", { x: m.l + 4, y: H - 22, "class": "note" }, svg, "downsampled: " + sr.segments + " segments merged into " + D.limits.bins + " time bins (each keeps its lowest and highest byte, its first and last ACK); zooming in does not add detail");
    return { xs: xs, m: m, W: W, H: H };
  }
  function drawGraphs() {
    var box = document.getElementById("graphs");
    if (!box) return;
    var ts = D.timeseq || [];
    var p = document.createElement("p");
    p.className = "how";
    p.id = "graphs-note";
    p.textContent = ts.length
      ? "Graphs for " + ts.length + " of " + D.flows_with_packets + " flows with packets" + (ts.length < D.flows_with_packets ? " (the " + D.limits.graphs + " with the most stalls)" : "") + "; " + D.flows_total + " flows in all."
      : "No packets were recorded for any flow, so there is no time-sequence graph" + (D.header.mode === "lab" ? " (lab rows carry no packet capture in this build)." : ".");
    box.appendChild(p);
    ts.forEach(function (t) {
      t.dirs.forEach(function (sr) {
        var svg = el("svg", { "class": "chart tseq", "data-flow": t.flow, "data-dir": sr.dir }, box);
        var first = Infinity, last = -Infinity;
        [sr.data, sr.ack].forEach(function (a) { a.forEach(function (q) { first = Math.min(first, q[0]); last = Math.max(last, q[0]); }); });
        if (!(last > first)) last = first + 1;
        var cur = [first, last], geo = drawSeries(svg, t, sr, cur[0], cur[1]), drag = null, box2 = null;
        counts.graphs++;
        function pos(ev) { var r = svg.getBoundingClientRect(); return (ev.clientX - r.left) * geo.W / r.width; }
        svg.addEventListener("mousedown", function (ev) { drag = pos(ev); box2 = el("rect", { x: drag, y: geo.m.t, width: 0, height: geo.H - geo.m.t - geo.m.b, "class": "zoombox" }, svg); });
        svg.addEventListener("mousemove", function (ev) { if (drag === null) return; var x = pos(ev); box2.setAttribute("x", Math.min(x, drag)); box2.setAttribute("width", Math.abs(x - drag)); });
        svg.addEventListener("mouseup", function (ev) {
          if (drag === null) return;
          var a = geo.xs.inv(Math.min(drag, pos(ev))), b = geo.xs.inv(Math.max(drag, pos(ev)));
          drag = null;
          if (b - a > (cur[1] - cur[0]) / 500) { cur = [a, b]; }
          geo = drawSeries(svg, t, sr, cur[0], cur[1]);
        });
        svg.addEventListener("dblclick", function () { cur = [first, last]; geo = drawSeries(svg, t, sr, first, last); });
      });
    });
  }

  // --- sortable tables
  function sortable(table) {
    var ths = table.querySelectorAll("thead th");
    ths.forEach(function (th, col) {
      var dir = 1;
      th.addEventListener("click", function () {
        var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var ca = a.cells[col], cb = b.cells[col];
          var va = ca.getAttribute("data-v"), vb = cb.getAttribute("data-v");
          if (va !== null && vb !== null) return (parseFloat(va) - parseFloat(vb)) * dir;
          return ca.textContent.localeCompare(cb.textContent) * dir;
        });
        rows.forEach(function (r) { body.appendChild(r); });
        dir = -dir;
      });
    });
  }

  drawErrbars();
  drawCdf();
  setupChosen();
  drawWire();
  document.querySelectorAll("table.sortable").forEach(sortable);
  hover("#strategies tbody tr");
  hover("#legend span");
  hover("path.cdf");
  document.querySelectorAll("#stalltable tr.pick").forEach(function (tr) {
    tr.addEventListener("click", function () { drawLadder(+tr.getAttribute("data-ladder")); });
  });
  drawLadder(D.ladders.length ? 0 : -1);
  drawGraphs();

  var ok = document.createElement("div");
  ok.id = "report-ok";
  ok.hidden = true;
  for (var k in counts) ok.setAttribute("data-" + k, counts[k]);
  // Milliseconds from navigation start to here: parsing, the data and every chart drawn.
  ok.setAttribute("data-ms", Math.round(performance.now()));
  document.body.appendChild(ok);
})();
