/* forge report: show the overview, or one rollout's viewer when the address ends in #rollout/<id>. */
(function () {
  "use strict";
  var overview = document.getElementById("overview");
  var viewers = document.querySelectorAll("section.viewer");

  function target() {
    var id = location.hash.slice(1);
    try { id = decodeURIComponent(id); } catch (e) { /* a malformed escape: use the raw text */ }
    return id;
  }

  function show() {
    var id = target();
    var page = id.indexOf("rollout/") === 0 ? document.getElementById(id) : null;
    overview.hidden = page !== null;
    for (var i = 0; i < viewers.length; i++) { viewers[i].hidden = viewers[i] !== page; }
    if (page !== null) {
      window.scrollTo(0, 0);
    } else if (id) {
      var anchor = document.getElementById(id);
      if (anchor) { anchor.scrollIntoView(); }
    }
  }

  var filter = document.getElementById("filter");
  if (filter) {
    filter.addEventListener("input", function () {
      var words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
      var rows = document.querySelectorAll("#rollout-list tbody tr");
      for (var i = 0; i < rows.length; i++) {
        var text = rows[i].textContent.toLowerCase();
        rows[i].hidden = !words.every(function (w) { return text.indexOf(w) >= 0; });
      }
    });
  }
  window.addEventListener("hashchange", show);
  show();
})();
