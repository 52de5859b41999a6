"""What a Workload will import on the engines, found on the client without importing it.

A fresh engine's first run of a person's transformers Workload spent 22.6 s of its 24 s
"start" importing transformers (1 x H200, docs/benchmarks.md, issue 34.8). Those names,
known as soon as the Workload exists, let the engines import them while the person is
still typing (lab/preload.py sends them; engine/preload.py imports them).

``workload_imports(wl)`` walks the Workload's callables (partial's arguments, closures,
defaults, the globals their code reads, nested functions' code) and returns what they
import: a module ("transformers.models.llama.modeling_llama") or a name a module gives out
("transformers.LlamaForCausalLM": ``from transformers import LlamaForCausalLM``, which on
transformers' lazy top module is where the 11 s go; ``import transformers`` alone is 2 s).
Only packages the engines import from an install: not the standard library, not nbtools
or torch (every engine has those already), not a module of the person's that travels by
value. It reads, never imports: the client stays free of torch and of the person's model.

``watch(fn)``: fn(workload) is called for every Workload made in this process from now on
(a Lab registers one, weakly); ``recent()``: the Workloads alive here, for a Lab started
after them.
"""
from __future__ import annotations

import dataclasses
import dis
import functools
import sys
import types
import weakref

# the engines import these themselves, at start (engine/liveness.py)
ALWAYS_THERE = frozenset({"nbtools", "torch", "__main__", "builtins"})
_MAX_DEPTH = 6        # closures of closures of ...: a Workload's functions are shallow
_MAX_ITEMS = 64       # a captured list of a million ints is data, not imports

_watchers: list = []                 # weakref.WeakMethod or weakref.ref to callables
_recent: list = []                  # weakref.ref to Workloads (a dataclass with eq is
_RECENT_MAX = 32                     # unhashable: no WeakSet); the newest last


def workload_imports(wl) -> tuple:
    """The names the engines import for this Workload, in the order found: its own
    ``imports=(...)`` first, then what its functions import."""
    found: dict = dict.fromkeys(getattr(wl, "imports", ()) or ())
    walker = _Walker()
    for f in dataclasses.fields(wl):
        if f.name != "imports":
            walker.value(getattr(wl, f.name), 0)
    found.update(dict.fromkeys(n for n in walker.names if _wanted(n)))
    return tuple(found)


def watch(fn) -> None:
    """Call fn(workload) for each Workload made from now on (weakly held: a bound method
    of a Lab does not keep the Lab alive)."""
    ref = weakref.WeakMethod(fn) if hasattr(fn, "__self__") else weakref.ref(fn)
    _watchers.append(ref)


def unwatch(fn) -> None:
    """Stop telling ``fn`` of new Workloads (a lab that closes)."""
    _watchers[:] = [r for r in _watchers if r() is not None and r() != fn]


def created(wl) -> None:
    """Workload.__post_init__ calls this: a watcher's failure never fails a Workload."""
    _recent[:] = [r for r in _recent if r() is not None][-_RECENT_MAX + 1:] + [weakref.ref(wl)]
    for ref in list(_watchers):
        fn = ref()
        if fn is None:
            continue
        try:
            fn(wl)
        except Exception:   # noqa: BLE001 - an early import is a courtesy, the run decides
            pass


def recent() -> list:
    """The Workloads made lately that are still alive (a lab started after them preloads them)."""
    return [wl for wl in (r() for r in _recent) if wl is not None]


def _wanted(name: str) -> bool:
    top = name.split(".")[0]
    if not top or top in ALWAYS_THERE or top in sys.stdlib_module_names:
        return False
    mod = sys.modules.get(top)
    if mod is None:
        return True       # imported only inside a function: the engines will import it
    path = getattr(mod, "__file__", None) or ""
    # a module of the person's own (a notebook's helper file) travels by value
    # (workload.to_payload): the engines could not import it by name
    return "-packages" in path


class _Walker:
    def __init__(self):
        self.names: list = []
        self.seen: set = set()

    def add(self, name) -> None:
        if isinstance(name, str) and name and name not in self.names:
            self.names.append(name)

    def value(self, v, depth: int, attrs: frozenset = frozenset()) -> None:
        if v is None or isinstance(v, (str, bytes, int, float, bool, complex)) or depth > _MAX_DEPTH:
            return
        if id(v) in self.seen:
            return
        self.seen.add(id(v))
        if isinstance(v, types.ModuleType):
            self.module(v, attrs)
        elif isinstance(v, functools.partial):
            self.value(v.func, depth + 1)
            for a in (*v.args, *v.keywords.values()):
                self.value(a, depth + 1)
        elif isinstance(v, types.MethodType):
            self.value(v.__func__, depth + 1)
            self.value(v.__self__, depth + 1)
        elif isinstance(v, types.FunctionType):
            self.function(v, depth)
        elif isinstance(v, type):
            self.add(v.__module__)
        elif isinstance(v, (tuple, list, set, frozenset)):
            for item in list(v)[:_MAX_ITEMS]:
                self.value(item, depth + 1)
        elif isinstance(v, dict):
            for k, item in list(v.items())[:_MAX_ITEMS]:
                self.value(k, depth + 1)
                self.value(item, depth + 1)
        else:
            if isinstance(v, types.BuiltinFunctionType):
                self.add(v.__module__)       # a C function of a package (its module's)
            self.add(type(v).__module__)     # an instance (a config object) unpickles its class

    def module(self, mod, attrs: frozenset) -> None:
        self.add(mod.__name__)
        # `transformers.LlamaForCausalLM(...)` in the code: on a lazy module (in its dir,
        # not loaded yet) that attribute is the import that costs; names the module
        # already holds come with its import
        try:
            lazy = set(dir(mod)) - set(vars(mod))
        except Exception:   # noqa: BLE001 - a module's own __dir__ may raise
            return
        for a in sorted(attrs & lazy):
            self.add(f"{mod.__name__}.{a}")

    def function(self, fn, depth: int) -> None:
        mod = getattr(fn, "__module__", None) or ""
        top = mod.split(".")[0]
        if top not in ("nbtools", "__main__") and _wanted(mod):
            self.add(mod)      # an installed package's function: its module imports the rest
            return
        self.add(mod)
        code_names: set = set()
        for code in _codes(fn.__code__):
            code_names.update(code.co_names)
            for name in _imports_of(code, fn.__globals__.get("__package__") or ""):
                self.add(name)
        attrs = frozenset(code_names)
        g = fn.__globals__
        for name in sorted(code_names):
            if name in g:
                self.value(g[name], depth + 1, attrs)
        for cell in fn.__closure__ or ():
            try:
                self.value(cell.cell_contents, depth + 1, attrs)
            except ValueError:      # an empty cell (a name assigned later)
                pass
        for d in (*(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values()):
            self.value(d, depth + 1, attrs)


def _codes(code):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _codes(c)


def _imports_of(code, package: str):
    """IMPORT_NAME targets: ``import a.b`` -> a.b; ``from a import x, y`` -> a.x, a.y
    (a submodule or a name a lazy module gives out: the engine's importer tries both);
    relative imports resolved against the function's package."""
    consts: list = []
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_CONST", "LOAD_SMALL_INT"):     # 3.14 loads level 0 so
            consts = (consts + [ins.argval])[-2:]
            continue
        if ins.opname == "IMPORT_NAME":
            level, fromlist = consts if len(consts) == 2 else (0, None)
            name = ins.argval
            if isinstance(level, int) and level > 0:
                base = package.rsplit(".", level - 1)[0] if package else ""
                name = f"{base}.{name}" if name and base else (base or name)
            if fromlist and fromlist != ("*",):
                for x in fromlist:
                    yield f"{name}.{x}"
            else:
                yield name
        consts = []
