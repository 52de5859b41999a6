"""Which kernels a card runs for each kind of work and dtype (the names
nbtools.analysis.kernels classifies): matmul in fp32 (highest / high = TF32), bf16, fp16;
conv2d fp32 (cudnn TF32 on / off), bf16, channels_last; SDPA and hand-written attention;
elementwise/reduction; a compiled (inductor) step, with max-autotune. Prints one line per
(case, kernel) with its total time; run: python3 benchmarks/gpu/kernel_names.py"""
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

dev = "cuda"
p = torch.cuda.get_device_properties(0)
print("device", torch.cuda.get_device_name(0), "sms", p.multi_processor_count,
      "torch", torch.__version__, {k: getattr(p, k) for k in dir(p)
                                  if not k.startswith("_") and "uuid" not in k})


def show(case, fn, n=3):
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    tot = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            tot[e.name] = tot.get(e.name, 0) + e.device_time
    for k, v in sorted(tot.items(), key=lambda kv: -kv[1])[:6]:
        print(f"{case:28s} {v / n:10.1f} us  {k[:150]}")


a = torch.randn(4096, 4096, device=dev)
b = torch.randn(4096, 4096, device=dev)
for prec in ("highest", "high", "medium"):
    torch.set_float32_matmul_precision(prec)
    show(f"mm fp32 {prec}", lambda: a @ b)
torch.set_float32_matmul_precision("highest")
try:
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    show("mm fp32 fp32_precision=tf32", lambda: a @ b)
    print("fp32_precision api ok", torch.get_float32_matmul_precision())
    torch.backends.cuda.matmul.fp32_precision = "ieee"
except Exception as e:
    print("fp32_precision api", type(e).__name__, e)
torch.set_float32_matmul_precision("highest")
show("mm bf16", lambda: a.bfloat16() @ b.bfloat16())
show("mm fp16", lambda: a.half() @ b.half())
with torch.autocast("cuda", dtype=torch.bfloat16):
    show("mm autocast bf16", lambda: a @ b)
lin = torch.nn.Linear(1024, 4096, device=dev)
x = torch.randn(8192, 1024, device=dev)
show("linear fp32", lambda: lin(x))
show("bmm fp32", lambda: torch.bmm(a.view(16, 1024, 1024), b.view(16, 1024, 1024)))

conv = torch.nn.Conv2d(64, 128, 3, padding=1, device=dev)
img = torch.randn(32, 64, 56, 56, device=dev)
for tf in (True, False):
    torch.backends.cudnn.allow_tf32 = tf
    show(f"conv fp32 cudnn_tf32={tf}", lambda: conv(img))
torch.backends.cudnn.allow_tf32 = True
with torch.autocast("cuda", dtype=torch.bfloat16):
    show("conv autocast bf16", lambda: conv(img))
conv_cl = conv.to(memory_format=torch.channels_last)
img_cl = img.to(memory_format=torch.channels_last)
with torch.autocast("cuda", dtype=torch.bfloat16):
    show("conv bf16 channels_last", lambda: conv_cl(img_cl))
bn = torch.nn.BatchNorm2d(128, device=dev)
y = torch.randn(32, 128, 56, 56, device=dev)
show("batchnorm fp32", lambda: bn(y))

q = torch.randn(16, 16, 512, 64, device=dev)
for dt in (torch.float32, torch.bfloat16):
    qq = q.to(dt)
    show(f"sdpa {dt}", lambda: F.scaled_dot_product_attention(qq, qq, qq, is_causal=True))
    show(f"hand attention {dt}", lambda: torch.softmax(qq @ qq.transpose(-1, -2) / 8, -1) @ qq)
show("gelu+sum fp32", lambda: F.gelu(a).sum())

m = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                        torch.nn.Linear(4096, 1024)).to(dev)
for mode in ("default", "max-autotune-no-cudagraphs"):
    torch._dynamo.reset()
    cm = torch.compile(m, mode=mode)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(3):
            cm(x)
        show(f"compiled mlp bf16 {mode}", lambda: cm(x))
