// Command scale builds kubeadm + flannel clusters of growing size in one
// process each and reports, per size, how long the build took, the peak
// resident memory, the established cross-node pod -> ClusterIP walk, how
// long one endpoint change takes to reach every node's rules (the median
// of -changes, one after another), and a full
// re-sync of every node with nothing changed (kube-proxy's periodic sync):
//
//	go run ./bench/scale                       # 100, 500, 1000, 2000, 5000 nodes
//	go run ./bench/scale -nodes 100,500 -services 1000
//	go run ./bench/scale -rollout one          # the pods one AddPod at a time
//
// What it models: the nodes join one after another (each AddNode settles:
// kubelet registration, flannel lease and mesh, kube-proxy's first
// sync); then the pods, pinned to their nodes by spec.nodeName (the
// scheduler is not involved and no Deployment or ReplicaSet objects
// exist), are created in waves of one pod per node (AddPods), which every
// kubelet starts together, one PodStartDelay (1 s of virtual time) per
// wave: 30 waves, 30 virtual seconds, 3 Events per pod, as workloads
// scaled up together reach the nodes. No kube-proxy reaches its hourly
// sync meanwhile. Then the Services are created in one batch
// (AddServices) and every node's kube-proxy syncs them. -rollout one
// creates the pods one AddPod after another instead, each spending its
// own PodStartDelay: 150,000 virtual seconds (41 hours) at 5,000 nodes,
// in which every node's kube-proxy makes its hourly full sync 41 times.
//
// Each size runs in a child process (the binary re-executes itself), so
// that the peak RSS (VmHWM in /proc/self/status) is that size's alone.
// Times are wall clock on whatever machine runs it: a measurement, not a
// test.
package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kubewalk/kubewalk/sim"
	"github.com/kubewalk/kubewalk/sim/kubeproxy"
	"github.com/kubewalk/kubewalk/sim/packet"
)

func main() {
	nodes := flag.String("nodes", "100,500,1000,2000,5000", "comma-separated cluster sizes (nodes)")
	pods := flag.Int("pods", 30, "pods per node")
	services := flag.Int("services", 10000, "ClusterIP Services")
	endpoints := flag.Int("endpoints", 3, "endpoints per Service")
	packets := flag.Int("packets", 20000, "established packets timed")
	changes := flag.Int("changes", 5, "endpoint changes timed one after another (the median is reported)")
	rollout := flag.String("rollout", "waves", "how the pods are created: waves (AddPods of one pod per node at a time: every kubelet starts one pod per PodStartDelay, 30 virtual seconds for 30 pods a node) or one (AddPod after AddPod, a second of virtual time each)")
	child := flag.Bool("child", false, "run one size in this process (internal)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the child to this file (one size only)")
	memlimit := flag.String("memlimit", "", "the Go runtime's soft memory limit in the child (GOMEMLIMIT syntax: 3584MiB; empty: none)")
	memprofile := flag.String("memprofile", "", "write a heap profile of the child, taken when the build is done, to this file (one size only)")
	flag.Parse()
	if *child {
		if *cpuprofile != "" {
			f, err := os.Create(*cpuprofile)
			if err == nil {
				err = pprof.StartCPUProfile(f)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "scale:", err)
				os.Exit(1)
			}
			defer pprof.StopCPUProfile()
		}
		n, err := strconv.Atoi(*nodes)
		if err == nil && *memlimit != "" {
			var limit int64
			if limit, err = parseBytes(*memlimit); err == nil {
				debug.SetMemoryLimit(limit)
			}
		}
		if err == nil {
			memProfile = *memprofile
			switch *rollout {
			case "waves", "one":
				err = run(n, *pods, *services, *endpoints, *packets, max(*changes, 1), *rollout == "waves")
			default:
				err = fmt.Errorf("-rollout %q: want waves or one", *rollout)
			}
		}
		if err != nil {
			pprof.StopCPUProfile()
			fmt.Fprintln(os.Stderr, "scale:", err)
			os.Exit(1)
		}
		return
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
	fmt.Printf("%d pods/node (rollout %s), %d Services x %d endpoints, GOMAXPROCS %d", *pods, *rollout, *services, *endpoints, runtime.GOMAXPROCS(0))
	if *memlimit != "" {
		fmt.Printf(", memory limit %s", *memlimit)
	}
	fmt.Println()
	fmt.Println("| nodes | pods | build | nodes / pods / services phase | peak RSS | established walk | one endpoint change, settled on every node (median) | full re-sync, no change |")
	fmt.Println("|---:|---:|---:|---|---:|---:|---:|---:|")
	for _, s := range strings.Split(*nodes, ",") {
		cmd := exec.Command(self, "-child", "-cpuprofile", *cpuprofile, "-memprofile", *memprofile, "-memlimit", *memlimit, "-rollout", *rollout, "-nodes", s, "-pods", strconv.Itoa(*pods), "-services", strconv.Itoa(*services),
			"-endpoints", strconv.Itoa(*endpoints), "-packets", strconv.Itoa(*packets), "-changes", strconv.Itoa(*changes))
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Printf("| %s | | failed: %v | | | | | |\n", s, err)
		}
	}
}

// memProfile is where run writes the heap profile when the build is done
// ("" for none).
var memProfile string

// run builds one cluster and prints its table row.
func run(nodes, podsPerNode, services, endpoints, packets, changes int, waves bool) error {
	cfg := sim.DefaultConfig()
	cfg.Seed = 1
	cfg.ClusterCIDR = netip.MustParsePrefix("10.64.0.0/11") // 8,192 node /24s
	c, err := sim.NewCluster(cfg)
	if err != nil {
		return err
	}
	if f := os.Getenv("SCALE_NODES_PROFILE"); f != "" {
		// The nodes phase alone (CPU profile).
		if pf, err := os.Create(f); err == nil {
			pprof.StopCPUProfile()
			_ = pprof.StartCPUProfile(pf)
		}
	}
	start := time.Now()
	cpu0 := cpuTime()
	for i := 0; i < nodes; i++ {
		addr := netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 20, byte((i + 10) >> 8), byte(i + 10)}), 16)
		if _, err := c.AddNode(sim.NodeSpec{Name: fmt.Sprintf("node-%05d", i), NICs: []sim.NICSpec{{
			Name: "eth0", Segment: "underlay", Addr: addr, Gateway: netip.MustParseAddr("172.20.0.1")}}}); err != nil {
			return err
		}
	}
	tNodes := time.Since(start)
	cpuNodes := cpuTime()
	if os.Getenv("SCALE_NODES_PROFILE") != "" {
		pprof.StopCPUProfile()
	}
	if f := os.Getenv("SCALE_PODS_PROFILE"); f != "" {
		// The pods phase alone (CPU profile; and, in f+".allocs", the
		// objects allocated during it).
		if pf, err := os.Create(f); err == nil {
			pprof.StopCPUProfile()
			_ = pprof.StartCPUProfile(pf)
			runtime.MemProfileRate = 64 << 10
		}
	}
	var msNodes runtime.MemStats
	runtime.ReadMemStats(&msNodes)
	// Pods in groups of `endpoints`, consecutive pods on consecutive nodes
	// so a Service's endpoints are spread; Service i selects group i mod
	// the number of groups.
	total := nodes * podsPerNode
	groups := max(total/endpoints, 1)
	web := []sim.Container{{Name: "web", Ports: []sim.ContainerPort{{Name: "http", ContainerPort: 80}}}}
	spec := func(j int) sim.PodSpec {
		return sim.PodSpec{Namespace: "scale", Name: fmt.Sprintf("pod-%06d", j), Node: fmt.Sprintf("node-%05d", j%nodes),
			Labels: map[string]string{"group": strconv.Itoa((j / endpoints) % groups)}, Containers: web}
	}
	if waves {
		// A wave is one pod per node, created together and started by
		// every kubelet in parallel (one PodStartDelay per wave): what
		// workloads scaled up together look like to the nodes, with the
		// scheduler bypassed (spec.nodeName set) and no workload objects.
		// 30 waves are 30 virtual seconds, so no kube-proxy reaches its
		// hourly sync while the pods start.
		for w := 0; w < total; w += nodes {
			batch := make([]sim.PodSpec, 0, nodes)
			for j := w; j < min(w+nodes, total); j++ {
				batch = append(batch, spec(j))
			}
			if _, err := c.AddPods(batch); err != nil {
				return err
			}
		}
	} else {
		for j := 0; j < total; j++ {
			if _, err := c.AddPod(spec(j)); err != nil {
				return err
			}
		}
	}
	tPods := time.Since(start) - tNodes
	cpuPods := cpuTime()
	var msPods runtime.MemStats
	runtime.ReadMemStats(&msPods)
	if f := os.Getenv("SCALE_PODS_PROFILE"); f != "" {
		pprof.StopCPUProfile()
		if af, err := os.Create(f + ".allocs"); err == nil {
			_ = pprof.Lookup("allocs").WriteTo(af, 0)
			_ = af.Close()
		}
	}
	fmt.Fprintf(os.Stderr, "pods phase: %.1f M objects allocated (%.0f per pod), %d GCs, %.2f GiB heap at its end\n",
		float64(msPods.Mallocs-msNodes.Mallocs)/1e6, float64(msPods.Mallocs-msNodes.Mallocs)/float64(max(total, 1)), msPods.NumGC-msNodes.NumGC, float64(msPods.HeapAlloc)/(1<<30))
	if f := os.Getenv("SCALE_SERVICES_PROFILE"); f != "" {
		// The Services phase alone (CPU profile).
		if pf, err := os.Create(f); err == nil {
			pprof.StopCPUProfile()
			_ = pprof.StartCPUProfile(pf)
		}
	}
	specs := make([]sim.ServiceSpec, services)
	for i := range specs {
		specs[i] = sim.ServiceSpec{Selector: map[string]string{"group": strconv.Itoa(i % groups)}, Service: kubeproxy.Service{
			Namespace: "scale", Name: fmt.Sprintf("svc-%05d", i),
			Ports: []kubeproxy.ServicePort{{Name: "http", Protocol: kubeproxy.ProtocolTCP, Port: 80, TargetPort: kubeproxy.FromInt(80)}}}}
	}
	svcs, err := c.AddServices(specs)
	if err != nil {
		return err
	}
	if os.Getenv("SCALE_SERVICES_PROFILE") != "" {
		pprof.StopCPUProfile()
	}
	build := time.Since(start)
	tSvcs := build - tNodes - tPods
	cpuSvcs := cpuTime()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	buildRSS := peakRSS()
	if memProfile != "" {
		runtime.GC()
		f, err := os.Create(memProfile)
		if err != nil {
			return err
		}
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}

	if f := os.Getenv("SCALE_WALK_PROFILE"); f != "" {
		if pf, err := os.Create(f); err == nil {
			pprof.StopCPUProfile()
			_ = pprof.StartCPUProfile(pf)
			defer pprof.StopCPUProfile()
		}
	}
	runtime.GC() // time the walk, not the collection of the build's garbage
	var live runtime.MemStats
	runtime.ReadMemStats(&live)
	// The process CPU time of each phase (both cores, GC included), on
	// stderr: on a shared machine it says more than the wall clock.
	fmt.Fprintf(os.Stderr, "%d nodes: build CPU %.1f s (%.1f / %.1f / %.1f), %d GCs, GC %.0f%% of CPU; peak RSS %s at the end of the build, live heap %.2f GiB in %.3f M objects (%.1f M allocated)\n", nodes,
		(cpuSvcs - cpu0).Seconds(), (cpuNodes - cpu0).Seconds(), (cpuPods - cpuNodes).Seconds(), (cpuSvcs - cpuPods).Seconds(),
		ms.NumGC, 100*ms.GCCPUFraction, buildRSS, float64(live.HeapAlloc)/(1<<30), float64(live.HeapObjects)/1e6, float64(ms.Mallocs)/1e6)
	walk, err := established(c, svcs[0], packets)
	if err != nil {
		return err
	}
	// Endpoint changes, one after another: an endpoint pod of one of the
	// last Services goes away, and the time until the controllers have
	// settled and kube-proxy on every node has synced it (the pod's
	// teardown, the EndpointSlice update and the syncs, which the control
	// plane spreads over virtual time); the median of `changes` is
	// reported (one alone moves with what the collector and the sweeper
	// do meanwhile). Then kube-proxy's full sync on every node with
	// nothing changed.
	if f := os.Getenv("SCALE_CHANGE_PROFILE"); f != "" {
		if pf, err := os.Create(f); err == nil {
			pprof.StopCPUProfile()
			_ = pprof.StartCPUProfile(pf)
			defer pprof.StopCPUProfile()
		}
	}
	walls, cpus := make([]time.Duration, changes), make([]time.Duration, changes)
	for k := range changes {
		// The pod is an endpoint: the first of the group Service
		// services-1-k selects (a Service of its own for each change
		// while there are more groups than changes).
		last := c.Pod("scale", fmt.Sprintf("pod-%06d", ((services-1-k%services)%groups)*endpoints))
		if last == nil {
			return fmt.Errorf("endpoint change %d: its pod is gone already (fewer pod groups than changes)", k+1)
		}
		runtime.GC()
		t0, c0 := time.Now(), cpuTime()
		if err := c.DeletePod(last.Spec.Namespace, last.Spec.Name); err != nil {
			return err
		}
		if err := c.Settle(); err != nil {
			return err
		}
		walls[k], cpus[k] = time.Since(t0), cpuTime()-c0
	}
	if os.Getenv("SCALE_CHANGE_PROFILE") != "" {
		pprof.StopCPUProfile()
	}
	change, cpuChange := median(walls), median(cpus)
	runtime.GC()
	t0, c0 := time.Now(), cpuTime()
	if err := c.Sync(); err != nil {
		return err
	}
	resync := time.Since(t0)
	fmt.Fprintf(os.Stderr, "endpoint change (median of %d) CPU %s, wall %s; re-sync CPU %s\n", changes, cpuChange.Round(time.Millisecond),
		roundAll(walls), (cpuTime() - c0).Round(time.Millisecond))
	fmt.Printf("| %d | %d | %.1f s | %.1f / %.1f / %.1f s | %s | %.0f ns | %s | %s |\n", nodes, total, build.Seconds(),
		tNodes.Seconds(), tPods.Seconds(), tSvcs.Seconds(), peakRSS(), walk, change.Round(time.Millisecond), resync.Round(time.Millisecond))
	return nil
}

// established times a bare ACK of an established connection from a pod on
// node 0 to svc's ClusterIP, the walk BenchmarkClusterIPEstablished times
// on the reference cluster, and returns ns per packet.
func established(c *sim.Cluster, svc *sim.Service, packets int) (float64, error) {
	client := c.Nodes()[0].Pods()[0]
	conn, err := client.Netns.DialTCP(client.IP, svc.ClusterIP(), 40000, 80, 1, nil)
	if err != nil {
		return 0, err
	}
	if err := c.World.Run(); err != nil {
		return 0, err
	}
	if !conn.Established {
		return 0, fmt.Errorf("handshake to %s failed", svc.Name())
	}
	ip, err := packet.TCP(packet.IP{Src: client.IP, Dst: svc.ClusterIP()}, packet.TCPSegment{
		Sport: 40000, Dport: 80, Seq: 2, Ack: 1, Flags: packet.TCPFlags{ACK: true}})
	if err != nil {
		return 0, err
	}
	e := c.World.Engine
	send := func(n int) error {
		for i := 0; i < n; i++ {
			p := e.Pool.Get()
			p.SetIPPacket(ip)
			client.Netns.SendPacket(p)
			if err := e.Run(); err != nil {
				return err
			}
		}
		return nil
	}
	if err := send(100); err != nil {
		return 0, err
	}
	t0, c0 := time.Now(), cpuTime()
	if err := send(packets); err != nil {
		return 0, err
	}
	// The CPU time too, on stderr: the wall clock of a walk on a shared
	// machine is mostly the wait for a core.
	fmt.Fprintf(os.Stderr, "established walk: %.0f cpu-ns/packet\n", float64((cpuTime()-c0).Nanoseconds())/float64(packets))
	return float64(time.Since(t0).Nanoseconds()) / float64(packets), nil
}

// parseBytes reads a size as GOMEMLIMIT does: a number with an optional
// B, KiB, MiB, GiB or TiB suffix.
func parseBytes(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.m
			break
		}
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("memory limit %q: want a size such as 3584MiB or 3.5GiB", s)
	}
	return int64(n * float64(mult)), nil
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSS is VmHWM from /proc/self/status, or the Go runtime's view of
// memory obtained from the OS where /proc is missing.
func peakRSS() string {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 3 && f[0] == "VmHWM:" {
				if kb, err := strconv.Atoi(f[1]); err == nil {
					return fmt.Sprintf("%.2f GiB", float64(kb)/(1<<20))
				}
			}
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		return fmt.Sprintf("%.2f GiB", float64(ru.Maxrss)/(1<<20))
	}
	return "?"
}

// median returns the middle of ds (the lower one of an even count).
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// roundAll renders ds to the millisecond, in order.
func roundAll(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.Round(time.Millisecond).String()
	}
	return strings.Join(parts, " ")
}
