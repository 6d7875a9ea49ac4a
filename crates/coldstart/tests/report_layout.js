// Injected into a test copy of a report by tests/report.rs (never into the report itself):
// measures, in the browser that laid the page out, what a reader would see cut off or
// overlapping, and writes the verdict into the DOM (a `pre` element with the id
// layout-verdict), where `chromium --dump-dom` prints it.
//
// - Every SVG text (titles, ticks, axis titles, bar values, track labels) lies inside its
//   SVG's viewport, and no two texts of one SVG overlap.
// - Every SVG lies inside its section's panel (nothing cut off by, or spilling past, it).
// - No two legend entries overlap, and each lies inside its section.
// - No card and no section holds content wider than itself (a long path that did not wrap).
// - The page is no wider than the window (nothing pushed off to the right).
(function () {
  var TOL = 0.5;
  var problems = [];
  var checked = 0;
  function box(el) { return el.getBoundingClientRect(); }
  function shown(b) { return b.width > 0 && b.height > 0; }
  function inside(a, b) {
    return a.left >= b.left - TOL && a.right <= b.right + TOL &&
      a.top >= b.top - TOL && a.bottom <= b.bottom + TOL;
  }
  function overlap(a, b) {
    return a.left < b.right - TOL && b.left < a.right - TOL &&
      a.top < b.bottom - TOL && b.top < a.bottom - TOL;
  }
  function fmt(b) {
    return '[' + Math.round(b.left) + ',' + Math.round(b.top) + ' ' +
      Math.round(b.width) + 'x' + Math.round(b.height) + ']';
  }
  function name(el) {
    var t = '';
    for (var i = 0; i < el.childNodes.length; i++) {
      if (el.childNodes[i].nodeType === 3) t += el.childNodes[i].nodeValue;
    }
    return JSON.stringify(t.trim().slice(0, 70));
  }
  function where(el) {
    var s = el.closest('section');
    var svg = el.closest('svg');
    return (s ? '#' + s.id : 'page') +
      (svg ? ' svg "' + (svg.getAttribute('aria-label') || '').slice(0, 60) + '"' : '');
  }
  document.querySelectorAll('svg').forEach(function (svg) {
    var frame = box(svg);
    if (!shown(frame)) return;
    var panel = svg.closest('section');
    if (panel) {
      var p = box(panel);
      var cs = getComputedStyle(panel);
      var content = {
        left: p.left + parseFloat(cs.borderLeftWidth),
        right: p.right - parseFloat(cs.borderRightWidth),
        top: p.top, bottom: p.bottom
      };
      if (!inside(frame, content)) {
        problems.push('cut off: ' + where(svg) + ' ' + fmt(frame) +
          ' is not inside its panel ' + fmt(p));
      }
    }
    var texts = [];
    svg.querySelectorAll('text').forEach(function (t) {
      var b = box(t);
      if (!shown(b)) return;
      checked++;
      if (!inside(b, frame)) {
        problems.push('cut off: ' + where(t) + ' text ' + name(t) + ' ' + fmt(b) +
          ' is not inside its SVG ' + fmt(frame));
      }
      for (var i = 0; i < texts.length; i++) {
        if (overlap(b, texts[i].b)) {
          problems.push('overlap: ' + where(t) + ' text ' + name(t) + ' ' + fmt(b) +
            ' and ' + name(texts[i].t) + ' ' + fmt(texts[i].b));
        }
      }
      texts.push({ t: t, b: b });
    });
  });
  document.querySelectorAll('.legend').forEach(function (legend) {
    var keys = [];
    var panel = legend.closest('section') || document.body;
    var p = box(panel);
    legend.querySelectorAll('.key').forEach(function (k) {
      var b = box(k);
      if (!shown(b)) return;
      checked++;
      if (!inside(b, p)) {
        problems.push('cut off: ' + where(k) + ' legend entry ' + name(k) + ' ' + fmt(b) +
          ' is not inside its panel ' + fmt(p));
      }
      for (var i = 0; i < keys.length; i++) {
        if (overlap(b, keys[i].b)) {
          problems.push('overlap: ' + where(k) + ' legend entries ' + name(k) + ' and ' +
            name(keys[i].k));
        }
      }
      keys.push({ k: k, b: b });
    });
  });
  document.querySelectorAll('.card, section').forEach(function (el) {
    checked++;
    if (el.scrollWidth > el.clientWidth + 1) {
      problems.push('cut off: ' + (el.id ? '#' + el.id : 'a card ' + name(el.querySelector('b') || el)) +
        ' holds content ' + el.scrollWidth + ' px wide in ' + el.clientWidth + ' px');
    }
  });
  var wide = document.documentElement.scrollWidth;
  if (wide > window.innerWidth + 1) {
    problems.push('cut off: the page is ' + wide + ' px wide in a window of ' +
      window.innerWidth + ' px');
  }
  var out = document.createElement('pre');
  out.id = 'layout-verdict';
  out.textContent = 'checked ' + checked + ' labels at ' + window.innerWidth + ' px: ' +
    (problems.length ? problems.length + ' problem(s)\n' + problems.join('\n') : 'ok');
  document.body.appendChild(out);
})();
