package netfilter

// Rule index: kube-proxy's KUBE-SERVICES chain is one rule per service
// port, `-d CLUSTER-IP/32 -p tcp -m comment --comment ... -m tcp --dport
// PORT -j KUBE-SVC-...`, and the kernel tests them one by one: that linear
// cost is what iptables mode is known for, and rules/packet shows it. A run
// of such rules is indexed by (destination, protocol, port) so that finding
// the one a packet matches is a lookup; the rules before it are still
// counted in Evaluations, since the kernel evaluates each of them (they
// match nothing else and have no side effects, so skipping the work is
// invisible). Counters and traces are those of the rules that match.

// minIndexRun is the shortest run of indexable rules worth an index.
var minIndexRun = 16 // a variable so tests can build the unindexed reference

type indexKey struct {
	dst   uint32
	dport uint16
	proto uint8
}

// word packs the key into the one nonzero word the run's table holds
// (the protocol is TCP or UDP, so never zero).
func (k indexKey) word() uint64 { return uint64(k.dst)<<24 | uint64(k.dport)<<8 | uint64(k.proto) }

// indexRun covers rules [start, end) of a chain, all indexable.
type indexRun struct {
	start, end int
	// keys is an open-addressing table (linear probing, at most half
	// full, 0 empty) of the keys the run's rules match; at[i] lists the
	// positions of the rules matching keys[i], in chain order.
	keys []uint64
	at   [][]int32
}

func (run *indexRun) slot(w uint64) int {
	mask := uint64(len(run.keys) - 1)
	i := (w * 0x9e3779b97f4a7c15 >> 32) & mask
	for run.keys[i] != 0 && run.keys[i] != w {
		i = (i + 1) & mask
	}
	return int(i)
}

func (run *indexRun) add(k indexKey, pos int32) {
	i := run.slot(k.word())
	run.keys[i] = k.word()
	run.at[i] = append(run.at[i], pos)
}

// indexKeyOf returns the key a rule matches exactly, and whether the rule
// matches nothing but that key: destination a single address, protocol
// TCP or UDP, one destination port, no other condition than comments.
func indexKeyOf(r *Rule) (indexKey, bool) {
	if r.invSrc || r.smsk != 0 || r.invDst || r.dmsk != 0xffffffff || r.in != "" || r.out != "" ||
		r.invProto || r.frag || (r.proto != 6 && r.proto != 17) {
		return indexKey{}, false
	}
	var port *tcpMatch
	for _, m := range r.ms {
		switch m := m.(type) {
		case *commentMatch:
		case *tcpMatch:
			if port != nil {
				return indexKey{}, false
			}
			port = m
		default:
			return indexKey{}, false
		}
	}
	if port == nil || port.udp != (r.proto == 17) || port.sport.set() || port.invSport || port.invDport ||
		port.dport.lo != port.dport.hi || port.flgMask != 0 || port.invFlags || port.invOption || port.option8 != 0 {
		return indexKey{}, false
	}
	return indexKey{dst: r.dst, dport: port.dport.lo, proto: r.proto}, true
}

// buildIndex indexes every run of at least minIndexRun indexable rules.
func (ch *Chain) buildIndex() {
	for _, r := range ch.rules {
		r.run = nil
	}
	if len(ch.rules) < minIndexRun {
		return
	}
	keys := make([]indexKey, len(ch.rules))
	ok := make([]bool, len(ch.rules))
	for i, r := range ch.rules {
		keys[i], ok[i] = indexKeyOf(r)
	}
	for i := 0; i < len(ch.rules); {
		if !ok[i] {
			i++
			continue
		}
		j := i
		for j < len(ch.rules) && ok[j] {
			j++
		}
		if j-i >= minIndexRun {
			n := 4
			for n < 2*(j-i) {
				n *= 2
			}
			run := &indexRun{start: i, end: j, keys: make([]uint64, n), at: make([][]int32, n)}
			for k := i; k < j; k++ {
				run.add(keys[k], int32(k))
				ch.rules[k].run = run
			}
		}
		i = j
	}
}

// next returns the position of the first rule at or after i in the run
// that c's packet matches, or the run's end.
func (run *indexRun) next(c *evalCtx, i int) int {
	if c.frag || !c.l4ok {
		return run.end
	}
	for _, k := range run.at[run.slot(indexKey{dst: c.dst, dport: c.dport, proto: c.proto}.word())] {
		if int(k) >= i {
			return int(k)
		}
	}
	return run.end
}
