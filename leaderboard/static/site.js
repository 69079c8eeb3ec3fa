/* The C-OOD leaderboard's pages: the index's table, filters, charts and permalink; a model page's chart.
   Hand-written, no libraries; reads the JSON embedded in the page. */
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"];
  var TEXT_KEYS = { m: 1, f: 1, k: 1, prov: 1, flag: 1 };

  function html(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) { node.textContent = text; }
    return node;
  }
  function svg(tag, attrs, text) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) { node.textContent = text; }
    return node;
  }
  function esc(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
  }
  /* A model name as HTML that may wrap after its separators (``vit_large_`` / ``patch16_384``), so a narrow column shows
     it whole on two lines rather than cutting the part that tells two names apart. */
  function breakable(name) { return esc(name).replace(/([_\-.@\/])/g, "$1<wbr>"); }
  function fmt(v, digits) { return v === null || v === undefined ? "-" : v.toFixed(digits === undefined ? 4 : digits); }
  function params(n) {
    if (n === null || n === undefined) { return "-"; }
    var units = [[1e9, "B"], [1e6, "M"], [1e3, "k"]];
    for (var i = 0; i < units.length; i++) { if (n >= units[i][0]) { return (n / units[i][0]).toFixed(1) + units[i][1]; } }
    return String(n);
  }
  /* A heatmap colour for an ood-auroc: red at chance (0.5) or below, yellow at 0.75, green at 1. */
  function heat(v) {
    var t = Math.max(0, Math.min(1, (v - 0.5) / 0.5));
    var stops = [[215, 48, 39], [254, 224, 139], [26, 152, 80]];
    var a = t < 0.5 ? stops[0] : stops[1], b = t < 0.5 ? stops[1] : stops[2], u = t < 0.5 ? t * 2 : t * 2 - 1;
    var rgb = a.map(function (c, i) { return Math.round(c + (b[i] - c) * u); });
    return { bg: "rgb(" + rgb.join(",") + ")", fg: t < 0.15 || t > 0.85 ? "#fff" : "#222" };
  }
  /* Axis bounds on a 0.1 grid, as integers in tenths (clean ticks: 0.5, 0.6, ... 1.0). */
  function tenths(values, floorAt, ceilAt) {
    var lo = floorAt, hi = ceilAt;
    values.forEach(function (v) { lo = Math.min(lo, Math.floor(v * 10 + 1e-9)); hi = Math.max(hi, Math.ceil(v * 10 - 1e-9)); });
    return [lo, hi > lo ? hi : lo + 1];
  }

  /* ---------------- tooltip ---------------- */
  var tip = document.getElementById("tip");
  function showTip(event, lines) {
    if (!tip) { return; }
    tip.textContent = "";
    lines.forEach(function (line) {
      var row = html("div");
      if (line.color) { row.appendChild(html("span", { "class": "swatch", style: "background:" + line.color })); }
      row.appendChild(document.createTextNode(line.text));
      tip.appendChild(row);
    });
    tip.hidden = false;
    var x = event.pageX + 14, y = event.pageY + 14;
    var width = tip.offsetWidth, room = document.documentElement.clientWidth + window.scrollX;
    tip.style.left = Math.max(4, x + width > room ? event.pageX - width - 14 : x) + "px";
    tip.style.top = y + "px";
  }
  function hideTip() { if (tip) { tip.hidden = true; } }

  /* ---------------- severity curves ---------------- */
  var L = 46, R = 14, T = 10, B = 38;
  /* A chart's width in SVG units: its box's width in pixels (text stays legible on a phone), within bounds. */
  function chartWidth(box, most) { return Math.max(340, Math.min(most, box.clientWidth || most)); }
  function drawCurves(box, legend, curves, levels) {
    box.textContent = "";
    legend.textContent = "";
    var W = chartWidth(box, 720), H = 270;
    var all = [];
    curves.forEach(function (c) {
      c.values.concat(c.lo || [], c.hi || []).forEach(function (v) { if (v !== null) { all.push(v); } });
    });
    var range = tenths(all, 5, 10), lo = range[0] / 10, hi = range[1] / 10;
    var pw = W - L - R, ph = H - T - B;
    function x(level) { return L + pw * level / Math.max(levels - 1, 1); }
    function y(v) { return T + ph * (hi - v) / (hi - lo); }
    var root = svg("svg", { "class": "severity", viewBox: "0 0 " + W + " " + H, role: "img",
      "aria-label": "ood-auroc per severity level" });
    for (var i = range[0]; i <= range[1]; i++) {
      var v = i / 10;
      root.appendChild(svg("line", { "class": "grid", x1: L, x2: L + pw, y1: y(v), y2: y(v) }));
      root.appendChild(svg("text", { "class": "ytick", x: L - 6, y: y(v) + 4, "text-anchor": "end" }, v.toFixed(1)));
    }
    for (var level = 0; level < levels; level++) {
      root.appendChild(svg("text", { "class": "xtick", x: x(level), y: T + ph + 16, "text-anchor": "middle" }, String(level)));
    }
    root.appendChild(svg("line", { "class": "chance", x1: L, x2: L + pw, y1: y(0.5), y2: y(0.5) }));
    root.appendChild(svg("text", { "class": "chance-label", x: L + pw - 4, y: y(0.5) - 4, "text-anchor": "end" }, "chance"));
    root.appendChild(svg("text", { "class": "axis", x: L + pw / 2, y: H - 4, "text-anchor": "middle" }, "severity level (0 = easiest)"));
    root.appendChild(svg("text", { "class": "axis", transform: "translate(12 " + (T + ph / 2) + ") rotate(-90)", "text-anchor": "middle" }, "ood-auroc"));
    var lines = curves.map(function (c, index) {
      var color = PALETTE[index % PALETTE.length];
      var points = c.values.map(function (v, level) { return v === null ? null : x(level).toFixed(1) + "," + y(v).toFixed(1); })
        .filter(Boolean).join(" ");
      var line = svg("polyline", { "class": "curve", points: points, stroke: color });
      line.appendChild(svg("title", {}, c.title || c.label));
      if (c.lo) { root.appendChild(errorBars(c, color, x, y)); }
      root.appendChild(line);
      var item = html("li", { title: c.title || c.label });
      item.appendChild(html("span", { "class": "swatch", style: "background:" + color }));
      item.appendChild(c.href ? html("a", { href: c.href }, c.label) : html("span", {}, c.label));
      item.addEventListener("mouseenter", function () { line.classList.add("hot"); });
      item.addEventListener("mouseleave", function () { line.classList.remove("hot"); });
      legend.appendChild(item);
      return { line: line, color: color };
    });
    var guide = svg("line", { "class": "guide", x1: 0, x2: 0, y1: T, y2: T + ph, visibility: "hidden" });
    root.appendChild(guide);
    var overlay = svg("rect", { "class": "overlay", x: L, y: T, width: pw, height: ph });
    root.appendChild(overlay);
    overlay.addEventListener("mousemove", function (event) {
      var box = root.getBoundingClientRect();
      var px = (event.clientX - box.left) * W / box.width;
      var level = Math.max(0, Math.min(levels - 1, Math.round((px - L) / pw * (levels - 1))));
      guide.setAttribute("x1", x(level)); guide.setAttribute("x2", x(level)); guide.setAttribute("visibility", "visible");
      var rows = curves.map(function (c, index) {
        var ends = c.lo && c.lo[level] !== null ? " [" + fmt(c.lo[level]) + ", " + fmt(c.hi[level]) + "]" : "";
        return { v: c.values[level], ends: ends, label: c.label, color: lines[index].color };
      })
        .filter(function (r) { return r.v !== null; })
        .sort(function (a, b) { return b.v - a.v; });
      showTip(event, [{ text: "level " + level }].concat(rows.map(function (r) {
        return { text: r.v.toFixed(4) + r.ends + " " + r.label, color: r.color };
      })));
    });
    overlay.addEventListener("mouseleave", function () { guide.setAttribute("visibility", "hidden"); hideTip(); });
    box.appendChild(root);
  }

  /* A curve's error bars: per level with an interval, a vertical line from its low to its high end, capped. */
  function errorBars(c, color, x, y) {
    var group = svg("g", { "class": "errbars", stroke: color });
    c.lo.forEach(function (lo, level) {
      var hi = c.hi[level];
      if (lo === null || hi === null) { return; }
      var at = x(level);
      group.appendChild(svg("line", { "class": "errbar", x1: at, x2: at, y1: y(lo), y2: y(hi), "data-level": level,
        "data-lo": lo, "data-hi": hi }));
      [lo, hi].forEach(function (v) { group.appendChild(svg("line", { "class": "cap", x1: at - 3, x2: at + 3, y1: y(v), y2: y(v) })); });
    });
    return group;
  }

  /* ---------------- id-accuracy vs mean ood-auroc ---------------- */
  function drawScatter(box, points) {
    box.textContent = "";
    var SW = chartWidth(box, 480), SH = 270;
    var xr = tenths(points.map(function (p) { return p.x; }), 10, 0), yr = tenths(points.map(function (p) { return p.y; }), 10, 0);
    if (!points.length) { xr = [0, 10]; yr = [5, 10]; }
    var pw = SW - L - R, ph = SH - T - B;
    function x(v) { return L + pw * (v - xr[0] / 10) / ((xr[1] - xr[0]) / 10); }
    function y(v) { return T + ph * (yr[1] / 10 - v) / ((yr[1] - yr[0]) / 10); }
    var root = svg("svg", { "class": "scatter", viewBox: "0 0 " + SW + " " + SH, role: "img",
      "aria-label": "id accuracy vs mean ood-auroc" });
    var i;
    for (i = yr[0]; i <= yr[1]; i++) {
      root.appendChild(svg("line", { "class": "grid", x1: L, x2: L + pw, y1: y(i / 10), y2: y(i / 10) }));
      root.appendChild(svg("text", { "class": "ytick", x: L - 6, y: y(i / 10) + 4, "text-anchor": "end" }, (i / 10).toFixed(1)));
    }
    for (i = xr[0]; i <= xr[1]; i++) {
      root.appendChild(svg("line", { "class": "grid", x1: x(i / 10), x2: x(i / 10), y1: T, y2: T + ph }));
      root.appendChild(svg("text", { "class": "xtick", x: x(i / 10), y: T + ph + 16, "text-anchor": "middle" }, (i / 10).toFixed(1)));
    }
    if (yr[0] <= 5 && yr[1] >= 5) { root.appendChild(svg("line", { "class": "chance", x1: L, x2: L + pw, y1: y(0.5), y2: y(0.5) })); }
    root.appendChild(svg("text", { "class": "axis", x: L + pw / 2, y: SH - 4, "text-anchor": "middle" }, "id accuracy"));
    root.appendChild(svg("text", { "class": "axis", transform: "translate(12 " + (T + ph / 2) + ") rotate(-90)", "text-anchor": "middle" }, "mean ood-auroc"));
    points.slice().sort(function (a, b) { return (a.color ? 1 : 0) - (b.color ? 1 : 0); }).forEach(function (p) {
      var dot = svg("circle", { "class": p.color ? "dot hl" : "dot", cx: x(p.x).toFixed(1), cy: y(p.y).toFixed(1), r: p.color ? 5 : 3 });
      if (p.color) { dot.setAttribute("fill", p.color); }
      dot.appendChild(svg("title", {}, p.label + ": id-acc " + fmt(p.x) + ", mean ood-auroc " + fmt(p.y)));
      dot.addEventListener("mousemove", function (event) {
        showTip(event, [{ text: p.label, color: p.color }, { text: "id-acc " + fmt(p.x) }, { text: "mean ood-auroc " + fmt(p.y) }]);
      });
      dot.addEventListener("mouseleave", hideTip);
      if (p.href) { dot.addEventListener("click", function () { window.location.href = p.href; }); }
      root.appendChild(dot);
    });
    box.appendChild(root);
  }
  function pearson(points) {
    var n = points.length;
    if (n < 3) { return null; }
    var mx = 0, my = 0, sxx = 0, syy = 0, sxy = 0;
    points.forEach(function (p) { mx += p.x / n; my += p.y / n; });
    points.forEach(function (p) { sxx += (p.x - mx) * (p.x - mx); syy += (p.y - my) * (p.y - my); sxy += (p.x - mx) * (p.y - my); });
    return sxx && syy ? sxy / Math.sqrt(sxx * syy) : null;
  }

  /* ---------------- paired tests ---------------- */
  var Z95 = 1.959963984540054;  /* the normal quantile of a two-sided 5% test */
  /* erfc to a fractional error under 1.2e-7 (Numerical Recipes' Chebyshev fit): p-values for display only. */
  function erfc(x) {
    var z = Math.abs(x), t = 1 / (1 + z / 2);
    var r = t * Math.exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 +
      t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));
    return x >= 0 ? r : 2 - r;
  }
  function fmtP(p) { return p >= 0.01 ? p.toFixed(2) : p >= 0.001 ? p.toFixed(3) : "< 0.001"; }
  function pText(p) { return "p " + (p < 0.001 ? "" : "= ") + fmtP(p); }
  /* The paired difference of entries ``a`` minus ``b`` on site key ``key`` from the page's paired data (values and the
     flat upper triangle of standard errors), as ``Pairwise.difference`` gives it; null where either has none. The
     test: |a - b| / se at least Z95 (a standard error of 0: identical data, never different). */
  function pairedDiff(pairs, key, a, b) {
    var p = pairs[key];
    if (!p || a.pi === undefined || b.pi === undefined || a.pi === b.pi) { return null; }
    var va = p.v[a.pi], vb = p.v[b.pi], n = p.v.length, i = Math.min(a.pi, b.pi), j = Math.max(a.pi, b.pi);
    var se = p.se[i * n - i * (i + 1) / 2 + j - i - 1];
    if (va === null || vb === null || se === null) { return null; }
    var d = va - vb, z = se > 0 ? Math.abs(d) / se : 0;
    return { d: d, a: va, b: vb, se: se, low: Math.max(d - Z95 * se, -1), high: Math.min(d + Z95 * se, 1),
      p: se > 0 ? erfc(z / Math.SQRT2) : 1, different: se > 0 && z >= Z95 };
  }
  /* Per row of ``view``, its range of ranks on ``key`` ("2-3", or "" without paired data), as ``rank_ranges``: among
     the rows with paired data, 1 + those shown better, up to their count less those shown worse. */
  function rankRanges(pairs, key, view, higher) {
    var valued = view.filter(function (r) { return pairs[key] && r.e.pi !== undefined && pairs[key].v[r.e.pi] !== null; });
    var ranges = new Map();
    valued.forEach(function (r) {
      var better = 0, worse = 0, v = pairs[key].v[r.e.pi];
      valued.forEach(function (o) {
        var found = o === r ? null : pairedDiff(pairs, key, o.e, r.e);
        if (!found || !found.different || found.a === v) { return; }
        if ((found.a > v) === higher) { better++; } else { worse++; }
      });
      var lo = 1 + better, hi = valued.length - worse;
      ranges.set(r, lo === hi ? String(lo) : lo + "-" + hi);
    });
    return view.map(function (r) { return ranges.has(r) ? ranges.get(r) : ""; });
  }

  /* ---------------- the index ---------------- */
  function index(data) {
    var DEFAULT = { kappa: "best", family: "", prov: "", status: "", flagged: "show", q: "", sort: "mean", dir: "desc",
      ks: data.kappas.slice(), sel: [], sf: "" };  /* sf: "1" puts flagged runs in the scatter and its r */
    var cols = {}, pairs = data.pairs || {};
    data.cols.forEach(function (c) { cols[c] = true; });
    var state;
    var $ = function (id) { return document.getElementById(id); };
    var tbody = document.querySelector("#leaderboard tbody");
    data.models.forEach(function (m) {
      m.e.forEach(function (e) { e.flag = e.flag || ""; e.ver = e.ver || "self-reported"; });
    });
    data.families.forEach(function (f) { $("family").appendChild(html("option", { value: f }, f)); });
    data.provenances.forEach(function (p) { $("prov").appendChild(html("option", { value: p }, p)); });

    function readState() {
      var raw = window.location.hash.length > 1 ? window.location.hash.slice(1) : window.location.search.slice(1);
      var params = new URLSearchParams(raw), next = {};
      Object.keys(DEFAULT).forEach(function (k) {
        var v = params.get(k);
        if (v === null) { next[k] = Array.isArray(DEFAULT[k]) ? DEFAULT[k].slice() : DEFAULT[k]; }
        else { next[k] = Array.isArray(DEFAULT[k]) ? v.split(",").filter(Boolean) : v; }
      });
      if (next.dir !== "asc") { next.dir = "desc"; }
      return next;
    }
    function writeState() {
      var params = new URLSearchParams();
      Object.keys(DEFAULT).forEach(function (k) {
        var v = Array.isArray(state[k]) ? state[k].join(",") : state[k];
        var d = Array.isArray(DEFAULT[k]) ? DEFAULT[k].join(",") : DEFAULT[k];
        if (v !== d) { params.set(k, v); }
      });
      var hash = params.toString();
      var url = window.location.href.split("#")[0] + (hash ? "#" + hash : "");
      if (url !== window.location.href) { history.replaceState(null, "", hash ? "#" + hash : window.location.pathname + window.location.search); }
      $("permalink-url").href = url;
    }
    function showControls() {
      ["kappa", "family", "prov", "status", "flagged"].forEach(function (k) { $(k).value = state[k]; });
      $("search").value = state.q;
      $("scatter-flagged").checked = state.sf === "1";
      document.querySelectorAll("#kappas input").forEach(function (box) {
        box.checked = state.ks.indexOf(box.value) >= 0;
        box.disabled = state.kappa !== "best";
      });
    }

    /* Each model's entry in the view: the chosen kappa's, or the best of the counted kappas (valid before flagged). */
    function rows() {
      var words = state.q.toLowerCase().split(/\s+/).filter(Boolean);
      var out = [];
      data.models.forEach(function (m) {
        var entry = null;
        for (var i = 0; i < m.e.length && !entry; i++) {
          var e = m.e[i];
          var kappaOk = state.kappa === "best" ? state.ks.indexOf(e.k) >= 0 : e.k === state.kappa;
          var flagOk = state.flagged === "show" || (state.flagged === "hide" ? !e.flag : !!e.flag);
          var provOk = (!state.prov || e.prov === state.prov) && (!state.status || e.ver === state.status);
          if (kappaOk && flagOk && provOk) { entry = e; }
        }
        if (!entry || (state.family && m.f !== state.family)) { return; }
        var text = (m.m + " " + (m.a || "") + " " + m.f + " " + entry.k).toLowerCase();
        if (!words.every(function (w) { return text.indexOf(w) >= 0; })) { return; }
        out.push({ model: m, e: entry });
      });
      var key = state.sort, sign = state.dir === "asc" ? 1 : -1;
      function value(r) {
        if (key === "m" || key === "f" || key === "n") { return r.model[key]; }
        if (/^l\d+$/.test(key)) { return r.e.l[parseInt(key.slice(1), 10)]; }
        return r.e[key];
      }
      out.sort(function (a, b) {
        if (key !== "flag" && !a.e.flag !== !b.e.flag) { return a.e.flag ? 1 : -1; }  /* broken runs last */
        var x = value(a), y = value(b);
        var xn = x === null || x === undefined || x === "", yn = y === null || y === undefined || y === "";
        if (xn || yn) { return xn === yn ? a.model.m.localeCompare(b.model.m) : (xn ? 1 : -1); }
        var c = TEXT_KEYS[key] ? String(x).localeCompare(String(y)) : x - y;
        return c ? sign * c : (b.e.mean || 0) - (a.e.mean || 0) || a.model.m.localeCompare(b.model.m);
      });
      return out;
    }

    /* One table cell as HTML; ``v`` (the sort value, for tests and tools) goes to data-v. */
    function td(cls, text, v, title) {
      return "<td" + (cls ? ' class="' + cls + '"' : "") + (v === undefined ? "" : ' data-v="' + esc(v === null ? "" : v) + '"') +
        (title ? ' title="' + esc(title) + '"' : "") + ">" + text + "</td>";
    }
    /* The interval of a row's metric ``key`` as a cell's title; "no interval" where the metric has one elsewhere. */
    function ends(e, key) {
      var ci = (e.ci || {})[key];
      return ci ? "95% interval [" + fmt(ci[0]) + ", " + fmt(ci[1]) + "]" : "no interval";
    }
    /* The paired test of a row against the row above on the sorted metric, where it does not reject: the two are not
       shown different; null where it rejects or either has no paired data. */
    function near(r, above) {
      var found = above ? pairedDiff(pairs, state.sort, r.e, above.e) : null;
      return found && !found.different ? found : null;
    }
    function row(r, i, view, ranks) {
      var m = r.model, e = r.e, out = [], tie = near(r, view[i - 1]);
      out.push('<tr data-model="' + esc(m.m) + '"' + (e.flag ? ' class="flagged"' : "") + (tie ? ' data-near="1"' : "") + ">");
      out.push(td("tick", '<input type="checkbox" aria-label="tick ' + esc(m.m) + '"' + (state.sel.indexOf(m.m) >= 0 ? " checked" : "") + ">"));
      out.push(td("rank", String(i + 1) + (tie ? '<span class="near">\u2248</span>' : ""), i + 1,
        tie ? "not shown different from #" + i + ": paired test " + pText(tie.p) : ""));
      if (data.pairs) { out.push(td("ranks", ranks[i] || "-", ranks[i])); }
      out.push(td("model text", '<a href="models/' + esc(m.p) + '" title="' + esc(m.m + (m.a ? " (also listed as " + m.a + ")" : "")) + '">' + breakable(m.m) + "</a>" +
        (e.ver === "verified" ? '<span class="verified" title="verified: re-run by the leaderboard">\u2713</span>' : ""), m.m));
      var rule = e.rule ? ' <span class="rule" title="severity rule">[' + esc(e.rule) + "]</span>" : "";
      out.push(td("text kap", esc(data.short[e.k] || e.k).replace(/([(,])/g, "$1<wbr>") + rule, e.k, e.k), td("mean", fmt(e.mean), e.mean, ends(e, "mean")));
      out.push(td("acc", fmt(e.acc), e.acc, ends(e, "acc")));
      if (cols.idauroc) { out.push(td("idauroc", fmt(e.idauroc), e.idauroc, e.idauroc === null ? "" : ends(e, "idauroc"))); }
      var strip = e.l.map(function (v, level) {
        if (v === null) { return '<span data-v="" title="level ' + level + ': -"></span>'; }
        var c = heat(v);
        return '<span data-v="' + v + '" title="level ' + level + ": " + fmt(v) + '" style="background:' + c.bg + ";color:" + c.fg + '">' +
          Math.round(v * 100) + "</span>";
      });
      out.push(td("strip-cell", '<div class="strip">' + strip.join("") + "</div>"));
      data.metrics.forEach(function (k) { if (cols[k]) { out.push(td("metric", fmt(e[k]), e[k])); } });
      if (cols.n) { out.push(td("params", params(m.n), m.n, m.n === null ? "unknown" : m.n.toLocaleString("en"))); }
      out.push(td("text fam", esc(m.f), m.f, m.f));
      out.push(td("text prov", esc(e.prov) + (e.ver === "verified" ? " \u2713" : ""), e.prov,
        e.ver === "paper" ? "paper: the published numbers" : e.prov + ", " + e.ver));
      out.push(td("text flag", e.flag ? "\u2691" : "", e.flag, e.flag), "</tr>");
      return out.join("");
    }
    /* The view's rows: the first FIRST at once, the rest in the next task, so the page paints early; the table's
       data-pending is set until every row is in (performance marks "rows-first" and "rows-all"). */
    var FIRST = 60, generation = 0;
    function render() {
      var view = rows(), ranks = rankRanges(pairs, state.sort, view, state.dir === "desc");
      var html = view.map(function (r, i) { return row(r, i, view, ranks); }), mine = ++generation, table = $("leaderboard");
      tbody.innerHTML = html.slice(0, FIRST).join("");
      performance.mark("rows-first");
      if (html.length > FIRST) {
        table.dataset.pending = "1";
        setTimeout(function () {
          if (mine !== generation) { return; }
          tbody.insertAdjacentHTML("beforeend", html.slice(FIRST).join(""));
          delete table.dataset.pending;
          performance.mark("rows-all");
        }, 0);
      } else {
        delete table.dataset.pending;
        performance.mark("rows-all");
      }
      $("count").textContent = String(view.length);
      return view;
    }
    function markSort() {
      document.querySelectorAll("#leaderboard [data-sort]").forEach(function (h) {
        var on = h.dataset.sort === state.sort;
        if (h.tagName === "TH") { if (on) { h.setAttribute("aria-sort", state.dir === "asc" ? "ascending" : "descending"); } else { h.removeAttribute("aria-sort"); } }
        else { h.className = on ? "sorted " + state.dir : ""; }
      });
      var strip = document.querySelector("#leaderboard th.strip-head");
      if (/^l\d+$/.test(state.sort) && strip) { strip.setAttribute("aria-sort", state.dir === "asc" ? "ascending" : "descending"); }
      else if (strip) { strip.removeAttribute("aria-sort"); }
    }
    /* A row's name in the charts: the model and its kappa as the table shows it (a submission file's by its name). */
    function label(r) { return r.model.m + " / " + (data.short[r.e.k] || r.e.k); }
    function charts(view) {
      var ticked = view.filter(function (r) { return state.sel.indexOf(r.model.m) >= 0; });
      var shown = state.sel.length ? ticked : view.slice(0, 10);
      $("plot-what").textContent = state.sel.length ? ticked.length + " ticked" : "top " + shown.length + " of the view";
      drawCurves($("curves"), $("legend"), shown.map(function (r) {
        return { label: label(r), title: r.model.m + " / " + r.e.k, values: r.e.l, lo: r.e.lo, hi: r.e.hi,
          href: "models/" + r.model.p };
      }), data.levels);
      var colors = {};
      shown.forEach(function (r, i) { colors[r.model.m] = PALETTE[i % PALETTE.length]; });
      var plotted = view.filter(function (r) { return r.e.acc !== null && r.e.mean !== null; });
      var flagged = plotted.filter(function (r) { return r.e.flag; }).length;
      if (state.sf !== "1") { plotted = plotted.filter(function (r) { return !r.e.flag; }); }
      var points = plotted.map(function (r) {
        return { x: r.e.acc, y: r.e.mean, label: label(r), color: colors[r.model.m], href: "models/" + r.model.p };
      });
      drawScatter($("scatter"), points);
      var r = pearson(points);
      $("scatter-n").textContent = String(points.length);
      $("scatter-r").textContent = r === null ? "-" : r.toFixed(3);
      $("scatter-left").textContent = !flagged ? "" : state.sf === "1" ? "; flagged runs included" :
        "; " + flagged + " flagged run" + (flagged === 1 ? "" : "s") + " left out";
    }
    /* The compare panel of exactly two ticked rows of the view: A (ticked first) minus B per common level, then mean
       ood-auroc, id-acc and id-auroc, each with its paired 95% interval and p-value; one line where either has no
       paired data. */
    function compare(view) {
      var panel = $("compare"), body = document.querySelector("#compare-table tbody");
      var two = state.sel.map(function (name) { return view.filter(function (r) { return r.model.m === name; })[0]; })
        .filter(Boolean);
      panel.hidden = two.length !== 2;
      body.textContent = "";
      if (panel.hidden) { return; }
      var a = two[0], b = two[1], lacking = two.filter(function (r) { return r.e.pi === undefined; });
      $("compare-what").textContent = "A: " + label(a) + "; B: " + label(b) + ". " + (lacking.length ?
        "No paired interval: " + lacking.map(label).join(" and ") + (lacking.length > 1 ? " keep" : " keeps") +
        " no per-image scores (published numbers, or a record made before them), so the images both saw are unknown." :
        "Paired over the images both entries saw: DeLong's test for the AUROCs, McNemar's for id-acc.");
      $("compare-table").hidden = lacking.length > 0;
      if (lacking.length) { return; }
      var keys = [];
      for (var level = 0; level < data.levels; level++) { keys.push(["l" + level, "level " + level + " ood-auroc"]); }
      keys.push(["mean", "mean ood-auroc"], ["acc", "id-acc"], ["idauroc", "id-auroc"]);
      keys.forEach(function (k) {
        var found = pairedDiff(pairs, k[0], a.e, b.e);
        if (!found) { return; }
        var tr = html("tr", { "data-key": k[0], "data-d": found.d, "data-low": found.low, "data-high": found.high, "data-p": found.p });
        [k[1], fmt(found.a), fmt(found.b), (found.d >= 0 ? "+" : "") + fmt(found.d),
          "[" + fmt(found.low) + ", " + fmt(found.high) + "]", fmtP(found.p)].forEach(function (text, i) {
          tr.appendChild(html("td", i ? {} : { "class": "text" }, text));
        });
        body.appendChild(tr);
      });
    }
    function update(controls) {
      if (controls) { showControls(); }
      markSort();
      var view = render();
      charts(view);
      compare(view);
      writeState();
    }

    ["kappa", "family", "prov", "status", "flagged"].forEach(function (k) {
      $(k).addEventListener("change", function () { state[k] = $(k).value; update(true); });
    });
    $("search").addEventListener("input", function () { state.q = $("search").value; update(false); });
    $("scatter-flagged").addEventListener("change", function () { state.sf = $("scatter-flagged").checked ? "1" : ""; update(false); });
    document.querySelectorAll("#kappas input").forEach(function (box) {
      box.addEventListener("change", function () {
        state.ks = Array.prototype.filter.call(document.querySelectorAll("#kappas input"), function (b) { return b.checked; })
          .map(function (b) { return b.value; });
        update(false);
      });
    });
    document.querySelectorAll("#leaderboard [data-sort]").forEach(function (h) {
      h.addEventListener("click", function (event) {
        event.stopPropagation();
        var key = h.dataset.sort;
        var up = TEXT_KEYS[key] || data.lower.indexOf(key) >= 0;  /* text, and a metric where lower is better */
        state.dir = key === state.sort ? (state.dir === "asc" ? "desc" : "asc") : (up ? "asc" : "desc");
        state.sort = key;
        update(false);
      });
    });
    tbody.addEventListener("change", function (event) {
      var box = event.target, name = box.closest("tr").dataset.model;
      state.sel = box.checked ? state.sel.concat([name]) : state.sel.filter(function (s) { return s !== name; });
      update(false);
    });
    $("clear").addEventListener("click", function () { state.sel = []; update(false); });
    $("permalink").addEventListener("click", function () {
      if (navigator.clipboard) { navigator.clipboard.writeText($("permalink-url").href).catch(function () {}); }
    });
    window.addEventListener("hashchange", function () { state = readState(); update(true); });
    if (window.matchMedia("(min-width: 701px)").matches) {  /* the prose and the filters folded on a phone */
      $("about").open = $("filters").open = true;
    }
    state = readState();
    update(true);
  }

  /* ---------------- a model page ---------------- */
  function model(data) {
    drawCurves(document.getElementById("curves"), document.getElementById("legend"), data.curves, data.levels);
    document.querySelectorAll(".per-class").forEach(function (section) {
      var pick = section.querySelector(".level-pick");
      pick.addEventListener("change", function () {
        section.querySelectorAll(".level-classes").forEach(function (div) { div.hidden = div.dataset.level !== pick.value; });
      });
    });
  }

  var board = document.getElementById("board-data"), one = document.getElementById("model-data");
  if (board) { index(JSON.parse(board.textContent)); }
  if (one) { model(JSON.parse(one.textContent)); }
}());
