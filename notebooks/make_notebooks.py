#!/usr/bin/python3
"""Writes the teaching notebooks from the cells below (run from notebooks/).
Edit here, rerun, and commit the .ipynb files."""
import nbformat as nbf

SETUP = '''import os, subprocess
from IPython.display import SVG, display, Markdown
ROOT = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True).stdout.strip()
import tempfile
KW = os.path.join(tempfile.gettempdir(), "kubewalk-notebook")
subprocess.run(["go", "build", "-o", KW, "./cmd/kubewalk"], cwd=ROOT, check=True)

def kw(*args, ok=True):
    """Runs the kubewalk CLI and returns its stdout; raises if it fails (unless ok=False)."""
    p = subprocess.run([KW, *args], capture_output=True, text=True)
    if ok and p.returncode != 0:
        raise RuntimeError(p.stderr.strip())
    return p.stdout if p.returncode == 0 else p.stderr

def show(*args):
    """Draws a walk as SVG."""
    display(SVG(kw(*args, "-o", "svg")))'''

def nb(cells):
    n = nbf.v4.new_notebook()
    n.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    n.cells = [nbf.v4.new_markdown_cell(c[1]) if c[0] == "md" else nbf.v4.new_code_cell(c[1]) for c in cells]
    return n

pod_to_pod = nb([
 ("md", "# A packet crosses the cluster\n\nWe follow one TCP connection from `net/client` on node **cka-w1** to `net/web-2` on node **cka-w2** in the reference cluster: kubeadm, flannel with its VXLAN backend, three nodes on one network `192.168.122.0/24`. Nothing here touches a real network: kubewalk simulates every device, and the same command always gives the same walk."),
 ("code", SETUP),
 ("md", "## The cluster\n\nFirst, what is there. Each node got a `/24` slice of the pod network `10.244.0.0/16`; flannel wrote one route per *other* node, pointing into the `flannel.1` VXLAN device."),
 ("code", 'print(kw("scenarios"))\nprint(kw("state", "--scenario", "reference", "--node", "cka-w1", "ip-route"))'),
 ("md", "Read the routes the way the kernel does: `10.244.1.0/24` is local (the `cni0` bridge where the pods of cka-w1 sit), while `10.244.2.0/24` — cka-w2's pods — goes `via 10.244.2.0 dev flannel.1 onlink`. That next hop is not a real machine: it is cka-w2's VTEP address, and flannel also wrote the neighbour and FDB entries that turn it into a MAC and then into the node IP `192.168.122.22`."),
 ("code", 'print(kw("state", "--scenario", "reference", "--node", "cka-w1", "ip-neigh"))\nprint(kw("state", "--scenario", "reference", "--node", "cka-w1", "bridge-fdb"))'),
 ("md", "## The walk\n\nNow the handshake itself. Follow the blue arrows for the SYN: out of the pod through its veth pair, into the `cni0` bridge, routed to `flannel.1`, **wrapped in VXLAN** (UDP port 8472, VNI 1), out of `eth0` across the underlay, unwrapped on cka-w2 and bridged down into `web-2`. The green arrows are the SYN-ACK coming back the mirror way. The final ACK takes exactly the SYN's path, so it is only listed."),
 ("code", 'show("trace", "--scenario", "reference", "--from", "net/client", "--to", "net/web-2", "--port", "80")'),
 ("md", "The text view says the same in one line per step. Notice the TTL: 64 leaving the pod, 63 after cka-w1 routed it, 62 after cka-w2 did — two routers, even though the pods feel \"directly connected\"."),
 ("code", 'print(kw("trace", "--scenario", "reference", "--from", "net/client", "--to", "net/web-2", "--port", "80", "--level", "summary")[:6000])'),
 ("md", "## The same walk as a sequence diagram\n\nMermaid text you can paste into a Markdown file on GitHub or GitLab. Each box is a node, each column a device."),
 ("code", 'print(kw("trace", "--scenario", "reference", "--from", "net/client", "--to", "net/web-2", "--port", "80", "-o", "mermaid"))'),
 ("md", "## Open it in Wireshark\n\n`-o pcapng` writes a capture with one interface per device. Open it with `-d udp.port==8472,vxlan` (flannel does not use the IANA port 4789) and you see the outer and inner headers exactly as on a real node."),
 ("code", 'import shutil\np = subprocess.run([KW, "trace", "--scenario", "reference", "--from", "net/client", "--to", "net/web-2", "-o", "pcapng"], capture_output=True, check=True)\nopen("/tmp/walk.pcapng", "wb").write(p.stdout)\nif shutil.which("tshark"):\n    print(subprocess.run(["tshark", "-n", "-r", "/tmp/walk.pcapng", "-d", "udp.port==8472,vxlan", "-Y", "vxlan"], capture_output=True, text=True).stdout)\nelse:\n    print("tshark is not installed; /tmp/walk.pcapng is ready for Wireshark")'),
])

services = nb([
 ("md", "# Services: ClusterIP, NodePort and conntrack\n\nA Service is not a process and not a device: it is a handful of iptables rules that kube-proxy writes on every node. A packet to the ClusterIP is rewritten (**DNAT**) to one pod, picked at random, and conntrack remembers the choice so the reply can be rewritten back."),
 ("code", SETUP),
 ("md", "## kube-proxy's rules\n\n`iptables-save` on a node shows the `KUBE-SERVICES` chain matching the ClusterIP, a `KUBE-SVC-…` chain choosing an endpoint with `--probability`, and one `KUBE-SEP-…` chain per endpoint doing the DNAT."),
 ("code", 'print(kw("state", "--scenario", "reference", "--node", "cka-w1", "iptables-save")[:4000])'),
 ("md", "## A ClusterIP walk\n\nThe client connects to the Service `net/web` on port 80. Look for the orange *DNAT* label: that is the moment the destination stops being the ClusterIP and becomes a pod IP. Depending on the random choice, the packet stays on cka-w1 or crosses to cka-w2."),
 ("code", 'out = kw("trace", "--scenario", "reference", "--from", "net/client", "--to", "service/net/web:80", "-o", "svg")\ndisplay(SVG(out)) if out.startswith("<?xml") else print(out)'),
 ("md", "## Random, but reproducible\n\nkube-proxy's rule *i* of *n* matches with probability 1/(n−i), so every endpoint gets an equal share. kubewalk draws from a seeded random source: change `--seed` and the choice may change; keep it and the walk is identical."),
 ("code", 'for seed in range(1, 6):\n    out = kw("trace", "--scenario", "reference", "--from", "net/client", "--to", "service/net/web:80", "--seed", str(seed), "--level", "minimal")\n    ends = [l for l in out.splitlines() if "delivered" in l and "tcp" in l][:1]\n    print(seed, ends[0] if ends else out.strip())'),
 ("md", "## NodePort\n\nFrom outside the cluster, a client uses any node's IP and the NodePort. The packet is DNATed on the node it hits — and **masqueraded**: with `externalTrafficPolicy: Cluster` kube-proxy marks every NodePort packet (`KUBE-MARK-MASQ`), and `MASQUERADE` gives it the address of the device it leaves by — the node's `flannel.1` address `10.244.N.0` when the pod is on another node, its `cni0` address when the pod is local. The pod therefore answers the node, and the reply comes back through the same node to be un-NATed. The client's own address is lost; `externalTrafficPolicy: Local` keeps it, at the price of answering only on nodes that run a pod."),
 ("code", 'out = kw("trace", "--scenario", "reference", "--from", "outside", "--to", "cka-w1:30080", "-o", "svg")\ndisplay(SVG(out)) if out.startswith("<?xml") else print(out)'),
 ("md", "## conntrack\n\nAfter the walk, conntrack holds the entry that made the reply work: original tuple towards the ClusterIP, reply tuple from the pod."),
 ("code", 'print(kw("state", "--scenario", "reference", "--node", "cka-w1", "conntrack", "--from", "net/client", "--to", "service/net/web:80"))'),
])

broken = nb([
 ("md", "# Three things that go wrong\n\nEach lab is the reference cluster with one mistake people really make. For each we run the same kind of walk and look for where it stops — the red X."),
 ("code", SETUP),
 ("md", "## 1. `br_netfilter` is off\n\nkubeadm's preflight asks for `net.bridge.bridge-nf-call-iptables = 1`. Without it, a packet that goes from one pod to another **through the bridge only** never meets iptables. That matters for the reply from a Service endpoint on the same node as the client: it is never un-DNATed, so the client receives an answer from the pod IP while it talked to the ClusterIP, and drops it."),
 ("code", 'out = kw("trace", "--scenario", "br-netfilter-off", "--from", "net/client", "--to", "service/net/web:80", "-o", "svg")\ndisplay(SVG(out)) if out.startswith("<?xml") else print(out)'),
 ("md", "## 2. Two nodes with the same podCIDR\n\nSomeone set `spec.podCIDR` by hand and gave cka-w1 and cka-w2 the same `10.244.1.0/24`. host-local on each node happily hands out the same addresses, and the other nodes can route that range to only one of them. Here a probe on cka-cp1 sends to `10.244.1.3` (web-1, on cka-w1) — but the route leads to cka-w2, where nobody answers ARP for that address."),
 ("code", 'print(kw("state", "--scenario", "duplicate-podcidr", "--node", "cka-cp1", "ip-route"))\nshow("trace", "--scenario", "duplicate-podcidr", "--from", "net/probe", "--to", "10.244.1.3", "--proto", "udp", "--port", "80")'),
 ("md", "The red X sits on cka-w2's `cni0`: *neighbour unresolved*. The fix is not in the network at all: delete the node objects and let kube-controller-manager allocate distinct ranges."),
 ("md", "## 3. The node IP is on the wrong NIC\n\nMany VM labs give every VM a NAT interface `eth0` with the *same* address `10.0.2.15`, and put the cluster network on `eth1`. Without `--node-ip` for kubelet and `--iface` for flannel, every node registers `10.0.2.15`, and flannel's FDB says every other VTEP lives at `10.0.2.15` — which is the node's own address."),
 ("code", 'print(kw("state", "--scenario", "wrong-nic", "--node", "cka-w1", "bridge-fdb"))\nshow("trace", "--scenario", "wrong-nic", "--from", "net/client", "--to", "net/web-2", "--port", "80")'),
 ("md", "The SYN is encapsulated towards `10.0.2.15`, delivered to cka-w1 itself through `lo`, decapsulated — and dropped because the inner frame was meant for cka-w2's VTEP. It never reaches the wire. With `--node-ip` and `--iface=eth1` set, the same walk goes through:"),
 ("code", 'show("trace", "--scenario", "wrong-nic-fixed", "--from", "net/client", "--to", "net/web-2", "--port", "80")'),
])

for name, n in [("01-pod-to-pod-vxlan", pod_to_pod), ("02-services-conntrack", services), ("03-things-that-go-wrong", broken)]:
    # Stable cell ids, so regenerating an unchanged notebook changes nothing.
    for i, cell in enumerate(n.cells):
        cell["id"] = "%s-%02d" % (name[:2], i)
    nbf.write(n, name + ".ipynb")
