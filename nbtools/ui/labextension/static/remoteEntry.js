/* torch-nbtools' JupyterLab extension: a figure that is a document.
 *
 * Written by hand as a module-federation container (what JupyterLab 4 loads for a prebuilt
 * extension: `_JUPYTERLAB[name]` with `init(shareScope)` and `get(module)`), so the wheel
 * ships it without a JavaScript build. It uses only modules the page already shares.
 *
 * - Renders `application/vnd.nbtools.figure.v1+json` outputs (each also carries the
 *   jupyter_bokeh widget view, a PNG and a line of text): the live widget while its model
 *   is in the kernel, else the PNG, with a line saying it is static. BokehJS is loaded from
 *   the installed bokeh (served by the nbtools.ui.labext server extension) once per page,
 *   the first time a figure needs it.
 * - On Save, each live figure's PNG is replaced by the picture its widget holds now
 *   (`_nbtools_picture`: drawn in the kernel by nbtools/ui/picture.py, the one renderer of
 *   every static picture, and redrawn after each change), so the saved file shows the
 *   figure as last seen and a panel its last run, with its config and summary.
 * - A jupyter_bokeh view whose kernel is gone drops its messages instead of throwing
 *   "Cannot send" from every resize; a view taken off the page sends nothing.
 * - A live panel whose kernel stopped says so and disables its controls.
 */
var _JUPYTERLAB;
(function () {
  "use strict";
  var NAME = "torch-nbtools";
  var FIGURE = "application/vnd.nbtools.figure.v1+json";
  var WIDGET = "application/vnd.jupyter.widget-view+json";
  var BUNDLES = ["bokeh.min.js", "bokeh-gl.min.js", "bokeh-widgets.min.js", "bokeh-tables.min.js"];
  var NOTE = "Static picture of the figure as last drawn: re-run the cell for the live, zoomable view.";
  var PENDING = "Drawing the live view from the running kernel\u2026";
  var NO_SERVER = "Static picture: this JupyterLab started before the torch-nbtools " +
    "extension was installed; restart JupyterLab for the live view.";
  var scope = null;
  var bokehLoading = null;

  function shared(pkg) {
    var versions = scope && scope[pkg];
    if (!versions) return Promise.reject(new Error(pkg + " is not shared in this page"));
    var keys = Object.keys(versions);
    var pick = keys.filter(function (k) { return versions[k].loaded; })[0] || keys[keys.length - 1];
    return Promise.resolve(versions[pick].get()).then(function (factory) { return factory(); });
  }

  function baseUrl() {
    var el = document.getElementById("jupyter-config-data");
    var url = el ? JSON.parse(el.textContent || "{}").baseUrl || "/" : "/";
    return url.endsWith("/") ? url : url + "/";
  }

  function script(src) {
    return new Promise(function (resolve, reject) {
      var s = document.createElement("script");
      s.src = src;
      s.onload = resolve;
      s.onerror = function () { reject(new Error("could not load " + src)); };
      document.head.appendChild(s);
    });
  }

  // BokehJS of the installed bokeh, once per page (in order: the extensions need the core).
  function loadBokeh() {
    if (window.Bokeh && window.Bokeh.require) return Promise.resolve();
    if (!bokehLoading) {
      var root = baseUrl() + "nbtools/bokehjs/";
      bokehLoading = BUNDLES.reduce(function (p, f) {
        return p.then(function () { return script(root + f); });
      }, Promise.resolve());
      bokehLoading.catch(function () { bokehLoading = null; });
    }
    return bokehLoading;
  }

  function sleep(ms) { return new Promise(function (r) { setTimeout(r, ms); }); }

  var PICTURE = "_nbtools_picture";      // nbtools/ui/saved_picture.py

  function makeFactory(lumino, rendermime, placeholder, live) {
    class FigureRenderer extends lumino.Panel {}
    FigureRenderer.prototype.init = function (options) {
      this.addClass("nbtools-figure");
      this.mimeType = options.mimeType;
      this._picture = new lumino.Widget();
      this._picture.addClass("nbtools-figure-static");
      this._picture.hide();
      this.addWidget(this._picture);
      this._inner = null;
      this._modelId = null;
      this._model = null;
      this._widget = null;
      this._observer = null;
      live.add(this);
      return this;
    };

    FigureRenderer.prototype.isLive = function () {
      return !!(this._inner && !this._inner.isDisposed && this._inner.isVisible !== false
                && this._inner.node.childElementCount > 0);
    };

    // While the live view may still come (the kernel is there, its widgets are being
    // restored), the picture's own caption ("re-run the cell") would be wrong: a line
    // covers it saying the live view is on its way. Removed once live or known static.
    FigureRenderer.prototype._pending = function (on) {
      var node = this._picture.node, cover = node.querySelector(".nbtools-figure-pending");
      if (!on) { if (cover) cover.remove(); return; }
      if (cover) return;
      node.style.position = "relative";
      cover = document.createElement("div");
      cover.className = "nbtools-figure-pending";
      cover.textContent = PENDING;
      cover.style.cssText = "position:absolute;left:0;right:0;bottom:0;height:30px;" +
        "background:#fff;color:#666;font:12px sans-serif;padding:6px 70px";
      node.appendChild(cover);
    };

    // A line over the picture's own caption, when that caption would send the reader the
    // wrong way.
    FigureRenderer.prototype._note = function (text) {
      var node = this._picture.node, line = document.createElement("div");
      node.style.position = "relative";
      line.className = "nbtools-figure-note";
      line.textContent = text;
      line.style.cssText = "position:absolute;left:0;right:0;bottom:0;height:30px;" +
        "background:#fff;color:#a40000;font:12px sans-serif;padding:6px 70px";
      node.appendChild(line);
    };

    FigureRenderer.prototype._settle = function () {
      var live = this.isLive();
      this._pending(!live && this._waiting);
      if (live) this._picture.hide(); else this._picture.show();
      if (this._inner && !live && this._inner.node.childElementCount === 0
          && /Error/.test(this._inner.node.textContent || "")) this._inner.hide();
    };

    FigureRenderer.prototype._drawPicture = function (data) {
      var png = data["image/png"];
      var node = this._picture.node;
      node.textContent = "";
      if (png) {
        var img = document.createElement("img");
        img.src = "data:image/png;base64," + png;
        img.alt = NOTE;
        img.style.maxWidth = "100%";
        node.appendChild(img);
      } else {
        var p = document.createElement("pre");
        p.textContent = data["text/plain"] || NOTE;
        node.appendChild(p);
      }
    };

    // The kernel behind a live panel stopped (shut down, died, restarted): its widgets
    // stay on the page but nothing they send arrives. Say so on the panel and disable
    // every control, rather than let Run or Compare silently do nothing.
    FigureRenderer.prototype.kernelStopped = function () {
      if (this._what !== "panel" || !this.isLive() || this._stopped) return;
      this._stopped = true;
      var note = document.createElement("div");
      note.className = "nbtools-kernel-stopped";
      note.textContent = "The kernel of this panel has stopped: its buttons are disabled. " +
        "Start a kernel and run the panel's cell again to use it.";
      note.style.cssText = "border:1px solid #d62728;background:#fdecea;color:#a40000;" +
        "padding:4px 8px;margin:4px 0;font-size:13px";
      this.node.insertBefore(note, this.node.firstChild);
      this._inner.node.querySelectorAll("button, input, select, textarea").forEach(
        function (el) { el.disabled = true; });
    };

    FigureRenderer.prototype.renderModel = function (model) {
      var self = this;
      this._model = model;
      var data = model.data;
      this._what = (data[FIGURE] || {}).what;
      this._drawPicture(data);
      var view = data[WIDGET] || {};
      if (this._inner && this._modelId === view.model_id) { this._settle(); return Promise.resolve(); }
      if (this._inner) { this._inner.dispose(); this._inner = null; }
      this._modelId = view.model_id;
      // The picture shows unless the live view appears soon (no flash of it when it does).
      var shown = setTimeout(function () { self._settle(); }, 1500);
      this._waiting = true;
      return this._goLive(view).catch(function (e) {
        console.debug("torch-nbtools: figure stays static:", e && e.message);
        // the extension is linked but its server side is not running (linked into an
        // editable install after this JupyterLab started): re-running the cell cannot help
        if (e && /could not load .*nbtools\/bokehjs/.test(e.message)) self._note(NO_SERVER);
      }).then(function () { clearTimeout(shown); self._waiting = false; self._settle(); });
    };

    FigureRenderer.prototype._goLive = async function (view) {
      if (!view.model_id) throw new Error("no widget model id");
      // jupyterlab-manager registers the notebook's widget renderer once its session is
      // ready; a renderer made before that would never get a manager.
      for (var i = 0; i < 600 && rendermime.getFactory(WIDGET) === placeholder; i++) await sleep(100);
      if (rendermime.getFactory(WIDGET) === placeholder) throw new Error("no widget manager");
      var inner = rendermime.createRenderer(WIDGET);
      var manager = inner._manager ? await inner._manager.promise : null;
      // A new page restores every widget of the kernel before `restored` fires (20-50 s
      // with many figures); a model already known (a cell just run, or restored early)
      // draws at once instead of waiting for all the others.
      for (var j = 0; j < 600 && manager && !manager.restoredStatus
                      && !manager.has_model(view.model_id); j++) await sleep(100);
      // Asking the manager first keeps a model that is gone (kernel stopped or restarted)
      // from showing "model not found" and a console error.
      if (manager && !manager.has_model(view.model_id)) {
        inner.dispose();
        throw new Error("widget model " + view.model_id + " is not in this kernel");
      }
      await loadBokeh();
      if (this.isDisposed || this._modelId !== view.model_id) { inner.dispose(); return; }
      this._widget = manager ? await manager.get_model(view.model_id) : null;
      this._inner = inner;
      this.addWidget(inner);
      var self = this;
      this._observer = new MutationObserver(function () { self._settle(); });
      this._observer.observe(inner.node, {childList: true, attributes: true,
                                          attributeFilter: ["class"]});
      var mime = {data: {}, metadata: {}, trusted: true, setData: function () {}};
      mime.data[WIDGET] = view;
      await inner.renderModel(mime);
    };

    // What the widget holds as its picture now, into the output the file will keep.
    FigureRenderer.prototype.snapshot = function () {
      if (!this._widget || !this._model || typeof this._model.setData !== "function") return;
      var png = this._widget.get(PICTURE);
      if (!png || png === this._model.data["image/png"]) return;
      var data = Object.assign({}, this._model.data);
      data["image/png"] = png;
      this._model.setData({data: data});
    };

    FigureRenderer.prototype.dispose = function () {
      if (this.isDisposed) return;
      live.delete(this);
      if (this._observer) this._observer.disconnect();
      lumino.Panel.prototype.dispose.call(this);   // Panel's own (the class adds none)
    };

    return {safe: false, mimeTypes: [FIGURE],
            createRenderer: function (options) { return new FigureRenderer().init(options); }};
  }

  // jupyter_bokeh 4.1's view sends every document change to the kernel; once the kernel is
  // gone its comm throws "Cannot send" from each resize or tab switch. The figure keeps
  // what it drew; the message has nowhere to go.
  // A view taken off the page (the panel's comparison replaced) keeps its Bokeh document,
  // which reacts to its own collapse (heights 0, every name refitted to no room): dozens of
  // messages that describe no figure a person sees, sent to a widget the kernel may close
  // meanwhile ("No such comm" on the kernel's stderr: JupyterLab's Log Console). A removed
  // view sends nothing.
  function quietBokehView(mod) {
    var View = mod && mod.BokehView;
    if (!View || View.prototype.__nbtools_quiet) return;
    var base = Object.getPrototypeOf(View.prototype).send;
    View.prototype.send = function () {
      if (this.__nbtools_removed) return undefined;
      try { return base.apply(this, arguments); }
      catch (e) {
        if (e && /Cannot send/.test(e.message)) return undefined;
        throw e;
      }
    };
    var remove = View.prototype.remove;
    View.prototype.remove = function () {
      this.__nbtools_removed = true;
      return remove.apply(this, arguments);
    };
    View.prototype.__nbtools_quiet = true;
  }

  // JupyterLab writes the kernel's language_info (Python's exact version among it) into the
  // notebook as the kernel starts, which marks a just-opened tutorial modified. When that is
  // the only difference from the file as loaded or last saved, it stays unmodified (the
  // next save still writes it).
  function keepCleanOnLanguageInfo(context) {
    var saved = null;
    function body() {
      var nb = context.model.toJSON();
      var meta = Object.assign({}, nb.metadata);
      delete meta.language_info;
      return JSON.stringify(Object.assign({}, nb, {metadata: meta}));
    }
    context.ready.then(function () {
      saved = body();
      context.model.metadataChanged.connect(function (model, change) {
        if (change.key !== "language_info" || saved === null) return;
        setTimeout(function () {            // after JupyterLab's own dirty update
          if (model.dirty && body() === saved) model.dirty = false;
        }, 0);
      });
    });
    context.saveState.connect(function (_, state) { if (state === "completed") saved = body(); });
  }

  var plugin = {
    id: NAME + ":figures",
    autoStart: true,
    activate: function (app) {
      shared("@bokeh/jupyter_bokeh").then(quietBokehView).catch(function () {});
      return shared("@lumino/widgets").then(function (lumino) {
        app.docRegistry.addWidgetExtension("Notebook", {
          createNew: function (panel, context) {
            var rendermime = panel.content.rendermime;
            var live = new Set();
            rendermime.addFactory(makeFactory(lumino, rendermime, rendermime.getFactory(WIDGET),
                                              live), -20);
            keepCleanOnLanguageInfo(context);
            var session = context.sessionContext, kernel = null;
            function stopped() {
              live.forEach(function (r) {
                try { r.kernelStopped(); } catch (e) { console.debug("torch-nbtools: stop", e); }
              });
            }
            session.ready.then(function () { kernel = session.session && session.session.kernel; });
            session.kernelChanged.connect(function (_, change) {
              if (kernel && change.oldValue === kernel) stopped();   // shut down or replaced
              kernel = change.newValue;
            });
            session.statusChanged.connect(function (_, status) {
              if (status === "dead" || status === "restarting" || status === "autorestarting") {
                stopped();
              }
            });
            context.saveState.connect(function (_, state) {
              if (state !== "started") return;
              live.forEach(function (r) {
                try { r.snapshot(); } catch (e) { console.debug("torch-nbtools: snapshot", e); }
              });
            });
          }
        });
      });
    }
  };

  var container = {
    init: function (shareScope) { scope = shareScope; },
    get: function (module) {
      if (module !== "./extension" && module !== "./index") {
        return Promise.reject(new Error('Module "' + module + '" does not exist in container.'));
      }
      return Promise.resolve(function () { return {__esModule: true, default: [plugin]}; });
    }
  };
  _JUPYTERLAB = typeof _JUPYTERLAB === "undefined" ? {} : _JUPYTERLAB;
  _JUPYTERLAB[NAME] = container;
  window._JUPYTERLAB = _JUPYTERLAB;
})();
