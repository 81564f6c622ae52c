package ipvs

// scheduler is one scheduling method (struct ip_vs_scheduler).
type scheduler interface {
	// schedule picks a destination for a new connection from src to
	// dst, or nil when none is available.
	schedule(s *Service, src, dst [4]byte, sport uint16) *Dest
	// reset is called when the destinations or their weights change
	// (update_service).
	reset(s *Service)
}

// Schedulers are the methods modelled: every one kube-proxy accepts (rr,
// wrr, lc, wlc, lblc, lblcr, sh, dh, sed, nq).
var Schedulers = []string{"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "sh", "dh", "sed", "nq"}

func newScheduler(name string) (scheduler, error) {
	switch name {
	case "rr":
		return &rr{}, nil
	case "wrr":
		return &wrr{}, nil
	case "lc":
		return leastConn{kind: "lc"}, nil
	case "wlc", "lblc", "lblcr":
		return leastConn{kind: "wlc"}, nil
	case "sed":
		return leastConn{kind: "sed"}, nil
	case "nq":
		return leastConn{kind: "nq"}, nil
	case "sh":
		return &hashSched{source: true}, nil
	case "dh":
		return &hashSched{}, nil
	}
	// request_module("ip_vs_%s") failed: the kernel answers ENOENT.
	return nil, &Error{Msg: "Scheduler not found"}
}

func available(d *Dest) bool { return d.Weight > 0 }

// rr is ip_vs_rr: the destination after the last one chosen, skipping
// weight 0, starting from the head of the list.
type rr struct{ last *Dest }

func (r *rr) reset(s *Service) {
	if r.last != nil && r.last.removed {
		r.last = nil
	}
}

func (r *rr) schedule(s *Service, _, _ [4]byte, _ uint16) *Dest {
	n := len(s.dests)
	start := 0
	if r.last != nil {
		for i, d := range s.dests {
			if d == r.last {
				start = i + 1
			}
		}
	}
	for k := range n {
		d := s.dests[(start+k)%n]
		if available(d) {
			r.last = d
			return d
		}
	}
	return nil
}

// wrr is ip_vs_wrr: interleaved weighted round robin with the current
// weight stepping down by the weights' gcd.
type wrr struct {
	cl     int // index of the last chosen destination, -1 for the head
	cw     int
	inited bool
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func (r *wrr) reset(s *Service) {
	r.cl, r.cw, r.inited = -1, maxWeight(s), true
}

func maxWeight(s *Service) int {
	m := 0
	for _, d := range s.dests {
		m = max(m, d.Weight)
	}
	return m
}

func (r *wrr) schedule(s *Service, _, _ [4]byte, _ uint16) *Dest {
	if !r.inited {
		r.reset(s)
	}
	mw := maxWeight(s)
	if mw == 0 || len(s.dests) == 0 {
		return nil
	}
	di := 0
	for _, d := range s.dests {
		if d.Weight > 0 {
			di = gcd(di, d.Weight)
		}
	}
	n := len(s.dests)
	for step := 0; step < n*(mw/di+1)+1; step++ {
		r.cl++
		if r.cl >= n {
			r.cl = -1
			r.cw -= di
			if r.cw <= 0 {
				r.cw = mw
			}
			continue
		}
		if d := s.dests[r.cl]; d.Weight >= r.cw && d.Weight > 0 {
			return d
		}
	}
	return nil
}

// leastConn covers lc (fewest (active<<8)+inactive), wlc (that divided by
// weight), sed ((active+1)/weight) and nq (an idle destination first,
// else sed), each keeping the first destination of the list on a tie.
type leastConn struct{ kind string }

func (leastConn) reset(*Service) {}

func overhead(d *Dest) int { return d.ActiveConns<<8 + d.InactConns }

func (l leastConn) schedule(s *Service, _, _ [4]byte, _ uint16) *Dest {
	var least *Dest
	loh := 0
	for _, d := range s.dests {
		if !available(d) {
			continue
		}
		switch l.kind {
		case "lc":
			if doh := overhead(d); least == nil || doh < loh {
				least, loh = d, doh
			}
		case "nq":
			if d.ActiveConns == 0 {
				return d
			}
			fallthrough
		case "sed":
			doh := d.ActiveConns + 1
			if least == nil || loh*d.Weight > doh*least.Weight {
				least, loh = d, doh
			}
		default: // wlc
			doh := overhead(d)
			if least == nil || loh*d.Weight > doh*least.Weight {
				least, loh = d, doh
			}
		}
	}
	return least
}

// hashSched is ip_vs_sh / ip_vs_dh: a 256-bucket table filled by walking
// the destinations (each weight times in a row) and indexed by a hash of
// the source (sh) or destination (dh) address.
type hashSched struct {
	source bool
	table  [256]*Dest
	built  bool
}

func (h *hashSched) reset(s *Service) {
	h.built = true
	h.table = [256]*Dest{}
	if len(s.dests) == 0 {
		return
	}
	i, count := 0, 0
	for b := range h.table {
		d := s.dests[i]
		h.table[b] = d
		count++
		if count >= max(d.Weight, 1) || !h.source {
			i = (i + 1) % len(s.dests)
			count = 0
		}
	}
}

// hash_32(v, 8) with GOLDEN_RATIO_32.
func hash8(v uint32) int { return int((v * 0x61C88647) >> 24) }

func (h *hashSched) schedule(s *Service, src, dst [4]byte, sport uint16) *Dest {
	if !h.built {
		h.reset(s)
	}
	a := dst
	if h.source {
		a = src
	}
	port := uint32(0)
	if h.source && s.Flags&FlagSchedSH2 != 0 {
		port = uint32(sport)
	}
	d := h.table[hash8(be(a)+port)]
	if d == nil || !available(d) {
		return nil
	}
	return d
}
