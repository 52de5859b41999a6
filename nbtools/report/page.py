"""An offline page of Bokeh figures, packed: BokehJS and the figures' document travel
gzip-compressed (base64 in inert script tags) and the page unpacks them with the browser's
own DecompressionStream before drawing; the page's text (tables, notes, headings) stays
plain HTML. ``unpacked`` gives the page with those blobs as text, for tools and tests.

Why: 22 CPU runs made a 6.4 MB report, 1.95 MB of it BokehJS (three bundles, 0.72 MB
packed) and 4.2 MB the figures' document, of which 2.6 MB is Bokeh's model structure that
gzip takes to 0.37 MB. And what Bokeh's ``file_html`` does beside serializing (validating
every model's references, a walk of all models for Python callbacks a static page cannot
have) was a third of an export's time; the figures are the same ones a notebook shows.
"""
from __future__ import annotations

import base64
import functools
import gzip
import html
import json
import re

from bokeh.core.serialization import Buffer
from bokeh.core.templates import FILE, MACROS, get_env
from bokeh.document import Document
from bokeh.embed.util import OutputDocumentFor, RenderItem
from bokeh.resources import INLINE
from bokeh.util.serialization import make_globally_unique_css_safe_id, make_globally_unique_id

LEVEL = 6           # gzip: level 9 took 2.5x the time for 1 % fewer bytes on a 4 MB document
BROWSERS = "Chrome or Edge 80, Firefox 113, Safari 16.4 or later"

_LOADER = """<script>
(function () {
  const say = (text) => {
    const d = document.createElement("div");
    d.className = "nbtools-figures-note";
    d.style.cssText = "border:1px solid #d62728;background:#fdecea;color:#a40000;padding:6px";
    d.textContent = text;
    document.body.prepend(d);
  };
  if (typeof DecompressionStream === "undefined" || typeof Response === "undefined") {
    say("This report's figures need a browser that unpacks gzip (%(browsers)s); " +
        "the tables and text below are complete without them.");
    return;
  }
  const unpack = async (id) => {
    const text = atob(document.getElementById(id).textContent.trim());
    const bytes = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  };
  // the document's blob: its JSON's length (4 bytes), the JSON, then the arrays' raw bytes,
  // which the JSON's {"type": "bytes", "data": {"id": ...}} name by place in "buffers"
  const documents = (blob) => {
    const n = new DataView(blob.buffer).getUint32(0, true);
    const docs = JSON.parse(new TextDecoder().decode(blob.subarray(4, 4 + n)));
    const at = docs.buffers;
    delete docs.buffers;
    const fill = (o) => {
      if (Array.isArray(o)) { o.forEach(fill); return; }
      if (o === null || typeof o !== "object") return;
      if (o.type === "bytes" && o.data && typeof o.data.id === "string") {
        const [start, length] = at[o.data.id];
        o.data = blob.slice(4 + n + start, 4 + n + start + length);   // its own buffer
        return;
      }
      for (const k in o) fill(o[k]);
    };
    fill(docs);
    return docs;
  };
  const draw = async () => {
    const [code, blob] = await Promise.all([Promise.all(%(js_ids)s.map(unpack)),
                                            unpack("%(doc_id)s")]);
    const decoder = new TextDecoder();
    for (const bytes of code) {
      const s = document.createElement("script");
      s.text = decoder.decode(bytes);
      document.head.appendChild(s);     // an inline script runs as it is inserted
    }
    await Bokeh.embed.embed_items(documents(blob), %(render_items)s);
  };
  const go = () => draw().catch((e) => {
    say("The figures could not be drawn: " + e);
    throw e;
  });
  if (document.readyState !== "loading") go();
  else document.addEventListener("DOMContentLoaded", go);
})();
</script>"""


def _packed(data) -> str:
    data = data.encode("utf-8") if isinstance(data, str) else data
    return base64.b64encode(gzip.compress(data, LEVEL, mtime=0)).decode("ascii")


def _blob(blob_id: str, data) -> str:
    # base64 holds no "<": the tag cannot end early, whatever the text held
    return f'<script type="application/gzip-base64" id="{blob_id}">{_packed(data)}</script>'


def document_bytes(doc, docid: str) -> bytes:
    """``{docid: doc's JSON}`` as the loader reads it: the JSON's length (uint32, little
    endian), the JSON, then every array's raw bytes, placed by "buffers" (id: [start,
    length]). Raw arrays in the one gzip stream: Bokeh's own way (each array gzipped, then
    base64 inside the JSON, which the page's gzip cannot shrink again) made the document
    0.28 MB larger on 22 runs, and gzip-ed each array once more."""
    out = doc.to_json(deferred=True)
    buffers, at, start = [], {}, 0
    for b in out.buffers:
        raw = b.to_bytes()
        at[b.id] = [start, len(raw)]
        buffers.append(raw)
        start += len(raw)
    text = json.dumps({docid: out.content, "buffers": at}, separators=(",", ":"),
                      allow_nan=False, default=_ref).encode("utf-8")
    return len(text).to_bytes(4, "little") + text + b"".join(buffers)


def _ref(o):
    if isinstance(o, Buffer):
        return {"id": o.id}
    raise TypeError(f"not JSON: {type(o).__name__}")


@functools.lru_cache(maxsize=8)
def _packed_js(text: str) -> str:
    """A BokehJS bundle packed once per process: the same bytes in every report."""
    return _packed(text)


def bokeh_page(roots, title: str, template: str, variables: dict) -> str:
    """The page of ``template`` (a Jinja body extending Bokeh's FILE template, its
    ``embed(roots[name])`` placing each root) with every root of ``roots`` (all in one
    Document: BokehJS is in the page once) drawn by the packed loader."""
    if all(r.document is None for r in roots):
        doc = Document()
        # added one by one, each add_root walked every model already in the document:
        # quadratic in runs (100 runs: 295 s); under one freeze it is walked once
        with doc.models.freeze():
            for r in roots:
                doc.add_root(r)
        return _render(doc, roots, title, template, variables)
    with OutputDocumentFor(roots) as doc:     # roots shown elsewhere before: Bokeh's way
        return _render(doc, roots, title, template, variables)


def _components(models) -> list:
    """BokehJS's bundles these models need, from the document's own registry: Bokeh's
    bundle_for_objs_and_resources walked every root's references again for it (a fifteenth
    of an export). TeX in a label (MathJax) is not something these figures write."""
    from bokeh.models import Plot
    from bokeh.models.widgets import TableWidget, Widget
    models = list(models)
    need = {"bokeh", "bokeh-widgets" if any(isinstance(m, Widget) for m in models) else "",
            "bokeh-tables" if any(isinstance(m, TableWidget) for m in models) else "",
            "bokeh-gl" if any(isinstance(m, Plot) and m.output_backend == "webgl"
                              for m in models) else ""}
    return [c for c in INLINE.components if c in need]


def _render(doc, roots, title: str, template: str, variables: dict) -> str:
    js = INLINE.clone(components=_components(doc.models)).js_raw
    docid = make_globally_unique_id()
    item = RenderItem(docid, roots={r: make_globally_unique_css_safe_id() for r in roots})
    doc_bytes = document_bytes(doc, docid)
    js_ids = [f"nbtools-bokehjs-{i}" for i in range(len(js))]
    blobs = "".join(f'<script type="application/gzip-base64" id="{i}">{_packed_js(text)}'
                    "</script>" for i, text in zip(js_ids, js))
    loader = _LOADER % dict(browsers=BROWSERS, js_ids=json.dumps(js_ids), doc_id="nbtools-docs",
                            render_items=json.dumps([item.to_json()]))
    page = get_env().from_string("{% extends base %}\n" + template)
    return page.render(dict(variables, title=title, bokeh_js="", bokeh_css="",
                            plot_script=blobs + _blob("nbtools-docs", doc_bytes) + loader,
                            docs=[item], doc=item, roots=item.roots, base=FILE,
                            macros=MACROS))


def unpacked(page: str) -> str:
    """``page`` with each packed blob as text (BokehJS; the figures' JSON, each array as
    the list of its numbers, escaped for HTML as Bokeh's own pages write it): what the
    browser draws from, for a reader of the file rather than of the page (tools, tests)."""
    def text(m) -> str:
        data = gzip.decompress(base64.b64decode(m.group(2)))
        if m.group(1) != "nbtools-docs":
            return f"<script>{data.decode('utf-8')}</script>"
        docs = json.dumps(_read_documents(data), separators=(",", ":"))
        return (f'<script type="application/json" id="{m.group(1)}">'
                + html.escape(docs, quote=False) + "</script>")
    return re.sub(r'<script type="application/gzip-base64" id="([^"]+)">([^<]*)</script>',
                  text, page)


def _read_documents(blob: bytes) -> dict:
    """The loader's ``documents`` in Python: the JSON with each array's bytes as numbers."""
    import numpy as np
    n = int.from_bytes(blob[:4], "little")
    docs = json.loads(blob[4:4 + n])
    at = docs.pop("buffers")

    def fill(o):
        if isinstance(o, list):
            return [fill(x) for x in o]
        if not isinstance(o, dict):
            return o
        if o.get("type") == "ndarray" and isinstance(o.get("array"), dict) \
                and o["array"].get("type") == "bytes":
            start, length = at[o["array"]["data"]["id"]]
            raw = blob[4 + n + start:4 + n + start + length]
            return dict(o, array=np.frombuffer(raw, dtype=o["dtype"]).tolist())
        return {k: fill(v) for k, v in o.items()}
    return fill(docs)
