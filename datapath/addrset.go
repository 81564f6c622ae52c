package datapath

// addrSet is a set of IPv4 addresses: up to addrSetSmall of them in the
// set itself, the rest in a map made when they no longer fit. A pod's
// namespace has two local addresses (127.0.0.1 and its own) and one
// broadcast address: no map.
type addrSet struct {
	small [addrSetSmall][4]byte
	n     uint8
	// m holds every member once made (small is then unused).
	m map[[4]byte]struct{}
}

// addrSetSmall is how many addresses an addrSet holds without a map.
const addrSetSmall = 4

// has reports whether a is in the set.
func (s *addrSet) has(a [4]byte) bool {
	if s.m != nil {
		_, ok := s.m[a]
		return ok
	}
	for i := range s.n {
		if s.small[i] == a {
			return true
		}
	}
	return false
}

// add puts a in the set.
func (s *addrSet) add(a [4]byte) {
	switch {
	case s.has(a):
	case s.m != nil:
		s.m[a] = struct{}{}
	case int(s.n) < addrSetSmall:
		s.small[s.n] = a
		s.n++
	default:
		s.m = make(map[[4]byte]struct{}, 2*addrSetSmall)
		for _, x := range s.small[:s.n] {
			s.m[x] = struct{}{}
		}
		s.m[a] = struct{}{}
		s.small, s.n = [addrSetSmall][4]byte{}, 0
	}
}

// del removes a from the set.
func (s *addrSet) del(a [4]byte) {
	if s.m != nil {
		delete(s.m, a)
		return
	}
	for i := range s.n {
		if s.small[i] == a {
			s.n--
			s.small[i], s.small[s.n] = s.small[s.n], [4]byte{}
			return
		}
	}
}
