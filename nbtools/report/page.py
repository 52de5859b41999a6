"""An offline page of Bokeh figures, packed: BokehJS and the figures' document travel
gzip-compressed (base85 in inert script tags) and the page unpacks them with the browser's
own DecompressionStream before drawing; the page's text (tables, notes, headings) stays
plain HTML. ``unpacked`` gives the page with those blobs as text, for tools and tests.

Why: 22 CPU runs of the demo's configs made a 6.6 MB report: 1.95 MB of BokehJS (three
bundles; 0.68 MB packed) and 4.4 MB of the figures' document, 2.8 MB of it Bokeh's model
structure, which gzip takes to 0.36 MB (packed: 1.76 MB for the whole document). And what
Bokeh's ``file_html`` does beside serializing (validating every model's references, walks
of all models for Python callbacks a static page cannot have and for the bundles) was a
fifth of an export's time; the figures are the same objects a notebook shows.
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
  const digit = new Uint8Array(128);
  for (let i = 0; i < 85; i++) digit["%(alphabet)s".charCodeAt(i)] = i;
  const base85 = (text) => {    // RFC 1924's digits (Python's b85encode), "<>" as ".,"
    const n = text.length, full = n - n %% 5, rest = n %% 5;
    const out = new Uint8Array(full / 5 * 4 + (rest ? rest - 1 : 0));
    let o = 0;
    const word = (i, k) => {
      let v = 0;
      for (let j = 0; j < 5; j++) v = v * 85 + (j < k ? digit[text.charCodeAt(i + j)] : 84);
      return v;
    };
    for (let i = 0; i < full; i += 5) {
      const v = word(i, 5);
      out[o++] = v >>> 24; out[o++] = (v >>> 16) & 255; out[o++] = (v >>> 8) & 255;
      out[o++] = v & 255;
    }
    if (rest) {
      const v = word(full, rest);
      for (let j = 0; j < rest - 1; j++) out[o++] = (v >>> (24 - 8 * j)) & 255;
    }
    return out;
  };
  const unpack = async (id) => {
    const bytes = base85(document.getElementById(id).textContent.trim());
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


# Base85 (RFC 1924, Python's b85encode) with "<" and ">" written "." and ",": 4 bytes in 5
# characters, where base64 takes 5.33 (0.17 MB less on 22 runs), and no "<" in a blob, so no
# "</script" or "<!--" can end or bend its script tag, whatever the bytes.
ALPHABET = ("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
            "!#$%&()*+-;.=,?@^_`{|}~")
_TO_PAGE, _FROM_PAGE = bytes.maketrans(b"<>", b".,"), bytes.maketrans(b".,", b"<>")


def _packed(data) -> str:
    data = data.encode("utf-8") if isinstance(data, str) else data
    return base64.b85encode(gzip.compress(data, LEVEL, mtime=0)).translate(_TO_PAGE) \
        .decode("ascii")


def _unpacked_bytes(text: str) -> bytes:
    return gzip.decompress(base64.b85decode(text.strip().encode("ascii").translate(_FROM_PAGE)))


def _blob(blob_id: str, data) -> str:
    return f'<script type="application/gzip-base85" id="{blob_id}">{_packed(data)}</script>'


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
    blobs = "".join(f'<script type="application/gzip-base85" id="{i}">{_packed_js(text)}'
                    "</script>" for i, text in zip(js_ids, js))
    loader = _LOADER % dict(browsers=BROWSERS, alphabet=ALPHABET, js_ids=json.dumps(js_ids),
                            doc_id="nbtools-docs",
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
        data = _unpacked_bytes(m.group(2))
        if m.group(1) != "nbtools-docs":
            return f"<script>{data.decode('utf-8')}</script>"
        docs = json.dumps(_read_documents(data), separators=(",", ":"))
        return (f'<script type="application/json" id="{m.group(1)}">'
                + html.escape(docs, quote=False) + "</script>")
    return re.sub(r'<script type="application/gzip-base85" id="([^"]+)">([^<]*)</script>',
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
