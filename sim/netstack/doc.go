// Package netstack runs real applications in the simulated network: a
// gVisor TCP/IP stack (gvisor.dev/gvisor/pkg/tcpip) owns the sockets of a
// pod's, a node's or an outside host's namespace, and Go code talks through
// it with the standard library's types: net.Conn from Stack.Dial (TCP and
// UDP), net.Listener from Stack.Listen, net.PacketConn from
// Stack.ListenPacket, an http.RoundTripper and http.Client from
// Stack.Transport and Stack.HTTPClient, an http.Server from
// Stack.ServeHTTP. NginxHandler answers like the nginx image's default
// server; Wget is busybox's `wget -qO- URL`.
//
// # Names
//
// ServeCoreDNS (StartCoreDNS for kubeadm's coredns pods) runs a DNS
// server in a pod that answers as CoreDNS's kubernetes plugin does with
// kubeadm's Corefile, from the cluster's Services. A stack given its
// resolv.conf (SetResolvConf; for a pod the kubelet's, dns.PodResolvConf)
// resolves names as glibc's getaddrinfo does (LookupHost; Wget, Dial and
// so the Transport's http.Client use it): the search list and ndots, an A
// and an AAAA query per name tried, over UDP through the namespace (so to
// the kube-dns ClusterIP, DNAT and all, to a CoreDNS pod on another node),
// glibc's timeouts and retries in virtual time.
//
//	r, _ := scenarios.NewReference(1)
//	web, _ := netstack.AttachPod(r.World, r.Web2)
//	web.ServeHTTP(":80", netstack.NginxHandler(web))
//	client, _ := netstack.AttachPod(r.World, r.Client)
//	resp, err := client.HTTPClient(0).Get("http://10.111.80.136/")
//
// # Where the stack sits
//
// The namespace keeps doing everything below the socket layer: devices,
// bridge, netfilter and conntrack, routing, ARP, VXLAN. Local delivery hands
// the stack every TCP and UDP packet and every ICMP message except echo
// requests (datapath.SocketOwner); a TCP segment to one of the stack's
// addresses that gVisor's IPv4 input would only pass up (no IP options,
// not a fragment, no broadcast, multicast or loopback source) goes
// straight to gVisor's TCP, the rest through its IPv4 input; checksums
// the simulation computed and nothing corrupted since are not verified
// again (as Linux trusts them across a veth), others are. What the stack
// writes enters the namespace's output path as locally generated packets
// (OUTPUT, routing, POSTROUTING, neighbour); a TCP segment with DF that
// fits the device's MTU gets its IPv4 header (the bytes gVisor's IPv4
// would write) and goes there without the rest of gVisor's IPv4 output
// (empty iptables, nothing to fragment), the rest through it. The stack's picture of the
// namespace is the namespace's own: one gVisor NIC per device with the
// device's MTU (read live, so the MSS behind flannel is 1450-40 = 1410),
// the device's addresses, and the namespace's routing table, copied again
// at every Dial, Listen and ListenPacket. ISNs, ephemeral ports (32768-60999) and
// TCP secrets come from a random source seeded by the world's seed and the
// namespace's name.
//
// # Time
//
// Every gVisor timer (retransmission, tail loss probe, keepalive,
// TIME-WAIT, SYN retries) is an event on the world's queue, fired in (time, sequence)
// order on the event loop; net.Conn deadlines (and so http.Server's
// ReadTimeout, WriteTimeout and IdleTimeout), a DialContext context's
// deadline, Transport.Timeout (the Timeout of HTTPClient), an
// http.Client's Timeout around a Transport of this package, a request
// context's deadline, and busybox wget's -T are on the world's clock too. A
// test that waits out a 127-second SYN timeout, a 30-second client timeout
// or a day of idle connection takes milliseconds. The errors are net/http's
// and net's: "context deadline exceeded (Client.Timeout exceeded while
// awaiting headers)", "... (Client.Timeout or context cancellation while
// reading body)", "dial tcp ...: i/o timeout".
//
// A deadline passed as a time.Time (SetDeadline, context.WithTimeout,
// Client.Timeout) is read relative to the wall clock when the call starts
// (Dial, RoundTrip, SetDeadline), rounded up to the millisecond, and runs
// in virtual time from there: a context made by context.WithTimeout and
// used after the world advanced an hour still has its whole duration.
// WithTimeout makes a context whose deadline is fixed in virtual time
// when it is made. What stays on the wall clock: the timer http.Client
// arms for its own Timeout (it fires only if the exchange takes that long
// in wall-clock time, which a simulated exchange does not), and the timers
// of an http.Transport built by hand around Stack.DialContext
// (ResponseHeaderTimeout, ExpectContinueTimeout, IdleConnTimeout, its
// context handling), whose dials alone are virtual.
//
// # Who runs the world
//
// Nothing runs the world in the background. A blocking call on a
// foreground socket (from Dial) or on the Transport drives the world on the
// caller's goroutine until the call can complete: it runs the world's
// events one at a time and, after each, brings the stacks and the
// goroutines they woke to rest (see below). Background sockets (a
// listener's Accept and the connections it returns, ListenPacket sockets,
// the Transport's own connections) only wait for whoever drives, so a
// server runs on its own goroutine (ServeHTTP does that) and never moves
// the world by itself. (A read of a response body whose bytes net/http
// already holds needs no event: it runs on the caller's goroutine, and
// what it wakes, the connection's read loop and whatever that hands the
// connection to, is brought to rest before it returns.) Do drives for an
// arbitrary function. Attaching a
// stack makes the world's Run, RunUntil and Advance drive the same way
// (sim.World.SetRunner), so Cluster.Settle runs until only background work
// is left with every stack and every goroutine it woke at rest after each
// event, and Cluster.RunFor lets a connection sit idle for a day with its
// keepalives answered. They return an error when called while another call
// drives the world (from a server's goroutine during a GET, say); calling
// the engine directly (World.Engine.Run) bypasses the stacks.
//
// A blocked call returns with the errors of the net package: "connect:
// connection refused" (syscall.ECONNREFUSED), "connect: no route to host"
// (EHOSTUNREACH, when ARP for the next hop fails and the router says so),
// "connect: connection timed out" after the SYN retries, "read: connection
// reset by peer", "i/o timeout" (os.ErrDeadlineExceeded, a net.Error with
// Timeout()). When no event is left that could make it complete, it
// returns an *IdleError (also a timeout) instead of hanging the test; so
// does a call without a deadline that stays blocked for DefaultMaxBlocked
// (24 h) of virtual time in a world that never idles (a write to a peer
// that never reads: its zero window is probed forever), and
// Cluster.Settle in such a world. SetMaxBlocked changes the bound.
//
// # Determinism
//
// gVisor processes TCP segments on goroutines of its own (its processors;
// each stack here gets one, whatever GOMAXPROCS is), and the applications
// on top are goroutines too: these are the one place in kubewalk where
// goroutines run during a walk. They are fenced in like this:
//
//   - The processor is kept paused (gVisor's own Pause, made for
//     save/restore) except inside a barrier: after an event delivered a
//     packet to a stack or fired one of its timers, or an application
//     called into it, the driver resumes and pauses it again; Pause
//     returns once the processor has drained its queue. No goroutine
//     dump, no polling, no patch to gVisor.
//   - Everything that touches the world (the engine, the stacks' gVisor
//     calls, their timers) runs under one world lock, held by the driver
//     while it steps and during barriers, and by an application goroutine
//     inside a netstack call; so frames enter the world's queue in one
//     order.
//   - After a step that touched a stack (delivered a packet, fired a
//     timer, passed a deadline, or saw an application call), the driver
//     releases the lock and yields (runtime.Gosched) until a round passes
//     in which the scheduler reports no goroutine ready to run
//     (runtime/metrics /sched/goroutines/runnable; with GOMAXPROCS > 1,
//     two rounds in a row in which, also, no goroutine entered or left a
//     netstack call): the goroutines the step woke (a reader, net/http's
//     readLoop and writeLoop, a server's handler) have all reached their
//     next blocking point before the next event runs. A step that touched
//     no stack (a frame moving from one device to the next) cannot have
//     woken anyone and goes straight on.
//   - Only one world drives at a time in a process.
//
// What is guaranteed: with GOMAXPROCS=1 (go test -cpu 1, or
// runtime.GOMAXPROCS(1) before the calls), the same scenario, seed and
// sequence of calls give the same frames, byte for byte, at the same
// virtual times, on every run (TestDeterministicFrames checks two runs of
// a cross-node HTTP exchange, fresh and kept-alive connections and a
// wget). This rests on the Go scheduler running a goroutine's readied
// goroutines before a yielding one resumes, and on the scheduler's
// runnable count, which is exact on one processor while the driver runs.
//
// With GOMAXPROCS above one, results stay correct (the same bytes reach
// the applications, errors are the same) but timing may vary from run to
// run: a goroutine already running in parallel on another processor is
// not in the runnable count, so it can still be on its way into a
// netstack call when the next event runs, and ACK timing and advertised
// windows may differ. (A stack's own segments are always handled in
// delivery order: it has one processor.) Before the clock moves on, the
// driver yields a few more rounds; before declaring the world idle, and
// before jumping the clock by more than a millisecond (to a timeout), it
// yields its OS thread (sched_yield, up to 200 times: a goroutine whose
// thread the kernel descheduled gets the core) and then waits in
// wall-clock time (until the scheduler shows nothing running or ready
// three times, at most some 40 ms), so an idle error or a spurious
// timeout is not caused by such a goroutine, short of a machine that
// deschedules it for longer than that. (Lowering GOMAXPROCS to one for
// each drive would make the one-processor guarantee hold whatever
// GOMAXPROCS is, but each switch stops the world, which on a loaded
// machine waits for the other thread: measured, it cost more than the
// parallel drive it replaced.)
//
// Application hygiene still matters: a server that writes the wall-clock
// time (net/http's automatic Date header) is not deterministic
// (NginxHandler writes the virtual time); connections from Accept do not
// implement CloseWrite, so net/http's server does not sleep its 500 ms of
// wall-clock time after a "Connection: close" response; stop servers with
// Close.
//
// # Where gVisor is not Linux
//
// The MSS a SYN offers is Linux's (the device's MTU minus 40); the rest
// of the handshake (option order, window scale, initial window) is
// gVisor's. A full data segment is smaller than Linux's: once SACK is
// negotiated (as Linux does by default, and as Attach sets), gVisor
// leaves room in every segment for the largest options it could send, so
// behind flannel (MSS 1410) a full segment carries 1370 bytes where
// Linux, which counts only the options it sends (the 12-byte timestamp),
// carries 1398 (TestMSSBehindFlannel).
//
// gVisor acks every segment it receives at once; Linux delays the ACK of
// in-order data, hoping to carry it on the application's answer. The
// stack's link endpoint holds back the pure ACKs Linux would delay (its
// quick-ACK and interactive modes, the 40 ms timer: see delack.go), so a
// kept-alive HTTP exchange takes two segments, request and response, as
// on a Linux node, where gVisor alone sends four; TestDelayedACK replays
// what Linux 6.18 sent for the same exchanges.
package netstack
