// Package route is an IPv4 routing table with longest-prefix match, modelled
// on the kernel's main table: routes have a destination prefix, an optional
// gateway, an output device, flags (onlink), a metric, a protocol, a scope
// and a preferred source, and print as `ip route` prints them.
package route

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Proto is who installed a route (rtm_protocol).
type Proto uint8

// Route protocols as iproute2 names them.
const (
	ProtoBoot   Proto = 3 // `ip route add` and most netlink users; not printed
	ProtoKernel Proto = 2 // connected routes from addresses
	ProtoStatic Proto = 4
	ProtoDHCP   Proto = 16
)

// String implements fmt.Stringer.
func (p Proto) String() string {
	switch p {
	case ProtoBoot:
		return "boot"
	case ProtoKernel:
		return "kernel"
	case ProtoStatic:
		return "static"
	case ProtoDHCP:
		return "dhcp"
	}
	return fmt.Sprint(uint8(p))
}

// Scope is the route scope (rtm_scope).
type Scope uint8

// Route scopes.
const (
	ScopeUniverse Scope = 0
	ScopeLink     Scope = 253
	ScopeHost     Scope = 254
)

// Type is the route type (rtm_type).
type Type uint8

// Route types modelled.
const (
	Unicast Type = iota
	Blackhole
	Unreachable
	Prohibit
)

// Route is one entry of the table. Dev is the output interface index; the
// table does not know devices, DevName is kept for printing.
type Route struct {
	Dst     netip.Prefix
	Gw      netip.Addr // invalid when the destination is directly connected
	Dev     int
	DevName string
	OnLink  bool
	Metric  int
	Proto   Proto
	Scope   Scope
	Src     netip.Addr // preferred source, invalid when unset
	Type    Type
	// LinkDown is printed as "linkdown" when the device has no carrier.
	LinkDown bool
}

// String prints r as `ip route show` does, without the trailing newline
// (iproute2 leaves a trailing space after the last attribute).
func (r *Route) String() string {
	var b strings.Builder
	switch r.Type {
	case Blackhole:
		b.WriteString("blackhole ")
	case Unreachable:
		b.WriteString("unreachable ")
	case Prohibit:
		b.WriteString("prohibit ")
	}
	if r.Dst.Bits() == 0 {
		b.WriteString("default")
	} else {
		b.WriteString(r.Dst.String())
	}
	if r.Gw.IsValid() {
		b.WriteString(" via ")
		b.WriteString(r.Gw.String())
	}
	if r.Type == Unicast {
		b.WriteString(" dev ")
		b.WriteString(r.DevName)
	}
	if r.Proto != ProtoBoot && r.Proto != 0 {
		b.WriteString(" proto ")
		b.WriteString(r.Proto.String())
	}
	if r.Scope == ScopeLink {
		b.WriteString(" scope link")
	} else if r.Scope == ScopeHost {
		b.WriteString(" scope host")
	}
	if r.Src.IsValid() {
		b.WriteString(" src ")
		b.WriteString(r.Src.String())
	}
	if r.Metric != 0 {
		fmt.Fprintf(&b, " metric %d", r.Metric)
	}
	if r.OnLink {
		b.WriteString(" onlink")
	}
	if r.LinkDown {
		b.WriteString(" linkdown")
	}
	b.WriteByte(' ')
	return b.String()
}

// Error is returned for invalid table operations, with the message the
// kernel's netlink answer would give.
type Error struct {
	Op    string
	Route string
	Msg   string
}

// Error implements the error interface.
func (e *Error) Error() string { return "route " + e.Op + " " + e.Route + ": " + e.Msg }

// Table is a routing table. Lookup is a longest-prefix match over one map
// per prefix length, longest first; among routes for the same prefix the
// lowest metric wins. Lookups do not allocate. A table of up to smallMax
// routes (a pod's: the default route and its subnet) keeps them in one
// slice instead, longest prefix first, then by address, then by metric:
// the same answers from one allocation instead of a map and a slice per
// prefix length.
type Table struct {
	// byLen is the maps, made by the first route beyond smallMax (nil
	// while the table is small).
	byLen *[33]map[uint32][]Route
	// small holds the routes while byLen is nil, in buf while they fit
	// (a pod's two: no allocation of their own). A Table is not copied
	// once it holds a route.
	small []Route
	buf   [2]Route
	// mapsOnly: routes always go to byLen (the reference the small
	// tables are compared with).
	mapsOnly bool
	lens     uint64 // bit i set when a route has prefix length i
	n        int
	gen      uint64
	// shared, when set, is a table of routes this one holds too (all but
	// the one at skip), without copies: see Shared.
	shared *Shared
	skip   netip.Prefix
	// unshare is called before a change to this table would touch a
	// route it holds through shared; it must copy them in (Unshare).
	unshare func()
	// notify, when set, is a counter every change of the table's
	// generation increments too (SetNotify).
	notify *uint64
}

// SetNotify makes every later change of t's generation (its own routes, or
// those of a Shared table it holds from then on) also increment *g: the
// datapath points it at its engine's configuration generation, so that a
// replayed walk need not compare each namespace's table generation.
func (t *Table) SetNotify(g *uint64) {
	t.notify = g
	if t.shared != nil {
		t.shared.notifyTo(g)
	}
}

// bump changes t's generation.
func (t *Table) bump() {
	t.gen++
	if t.notify != nil {
		*t.notify++
	}
}

// Gen is the table's generation: it changes whenever a route is added or
// removed, so a cached Lookup answer taken at the same generation is still
// the answer (the datapath's per-namespace destination cache relies on it).
// A route of a shared table changing changes the generation of every
// table that holds it.
func (t *Table) Gen() uint64 {
	if t.shared != nil {
		return t.gen + t.shared.gen
	}
	return t.gen
}

// smallMax is the most routes a table keeps in its small slice.
const smallMax = 6

// isSmall reports whether t keeps its routes in small.
func (t *Table) isSmall() bool { return t.byLen == nil }

// own is t's own routes for exactly the prefix of length bits at key k,
// lowest metric first.
func (t *Table) own(bits int, k uint32) []Route {
	if !t.isSmall() {
		return t.byLen[bits][k]
	}
	for i := range t.small {
		if r := &t.small[i]; r.Dst.Bits() == bits && key(r.Dst.Addr().As4(), bits) == k {
			j := i + 1
			for j < len(t.small) && t.small[j].Dst == r.Dst {
				j++
			}
			return t.small[i:j:j]
		}
	}
	return nil
}

// smallBefore orders the small slice: longest prefix first, then by
// address, then by metric.
func smallBefore(a, b *Route) bool {
	if a.Dst.Bits() != b.Dst.Bits() {
		return a.Dst.Bits() > b.Dst.Bits()
	}
	if c := a.Dst.Addr().Compare(b.Dst.Addr()); c != 0 {
		return c < 0
	}
	return a.Metric < b.Metric
}

// insert adds r to t's own routes (no route with its destination and
// metric is there), keeping the order of each store.
func (t *Table) insert(r Route) {
	bits := r.Dst.Bits()
	if !t.mapsOnly && t.byLen == nil && len(t.small) < smallMax {
		if t.small == nil {
			t.small = t.buf[:0:len(t.buf)]
		}
		i := 0 // after every route not ordered after r (as the maps append)
		for i < len(t.small) && !smallBefore(&r, &t.small[i]) {
			i++
		}
		t.small = slices.Insert(t.small, i, r)
		t.lens |= 1 << bits
		return
	}
	if t.byLen == nil {
		// Beyond smallMax: every route moves to the maps, for good.
		t.byLen = new([33]map[uint32][]Route)
		small := t.small
		t.small = nil
		for _, x := range small {
			t.insertMap(x)
		}
		t.buf = [2]Route{} // keep no copies alive
	}
	t.insertMap(r)
}

func (t *Table) insertMap(r Route) {
	bits := r.Dst.Bits()
	k := key(r.Dst.Addr().As4(), bits)
	if t.byLen[bits] == nil {
		t.byLen[bits] = map[uint32][]Route{}
	}
	rs := append(t.byLen[bits][k], r)
	slices.SortStableFunc(rs, func(a, b Route) int { return cmp.Compare(a.Metric, b.Metric) })
	t.byLen[bits][k] = rs
	t.lens |= 1 << bits
}

// remove deletes t's own route for dst at metric (metric < 0: the lowest),
// reporting whether there was one and whether dst has no route left.
func (t *Table) remove(dst netip.Prefix, metric int) (removed, last bool) {
	bits := dst.Bits()
	k := key(dst.Addr().As4(), bits)
	if t.isSmall() {
		for i := range t.small {
			x := &t.small[i]
			if x.Dst.Bits() != bits || key(x.Dst.Addr().As4(), bits) != k || (metric >= 0 && x.Metric != metric) {
				continue
			}
			t.small = slices.Delete(t.small, i, i+1)
			last = len(t.own(bits, k)) == 0
			if !slices.ContainsFunc(t.small, func(r Route) bool { return r.Dst.Bits() == bits }) {
				t.lens &^= 1 << bits
			}
			return true, last
		}
		return false, false
	}
	if t.byLen[bits] == nil {
		return false, false
	}
	rs := t.byLen[bits][k]
	for i, x := range rs {
		if metric < 0 || x.Metric == metric {
			rs = append(rs[:i], rs[i+1:]...)
			if len(rs) == 0 {
				delete(t.byLen[bits], k)
				if len(t.byLen[bits]) == 0 {
					t.lens &^= 1 << bits
				}
			} else {
				t.byLen[bits][k] = rs
			}
			return true, len(rs) == 0
		}
	}
	return false, false
}

// eachPrefix calls f with each of t's own destinations' routes.
func (t *Table) eachPrefix(f func(rs []Route)) {
	for i := 0; i < len(t.small); {
		j := i + 1
		for j < len(t.small) && t.small[j].Dst == t.small[i].Dst {
			j++
		}
		f(t.small[i:j:j])
		i = j
	}
	if t.byLen != nil {
		for _, m := range t.byLen {
			for _, rs := range m {
				f(rs)
			}
		}
	}
}

func key(a [4]byte, bits int) uint32 {
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	if bits == 0 {
		return 0
	}
	return v & (^uint32(0) << (32 - bits))
}

// Add inserts r. Like `ip route add`, it fails if a route with the same
// destination and metric exists.
func (t *Table) Add(r Route) error {
	if err := check(&r); err != nil {
		return err
	}
	t.touch(r.Dst)
	bits := r.Dst.Bits()
	for _, x := range t.own(bits, key(r.Dst.Addr().As4(), bits)) {
		if x.Metric == r.Metric {
			return &Error{Op: "add", Route: r.String(), Msg: "RTNETLINK answers: File exists"}
		}
	}
	t.insert(r)
	t.n++
	t.bump()
	if t.shared != nil {
		t.shared.claim(t, r.Dst)
	}
	return nil
}

// Replace inserts r or replaces the route with the same destination and
// metric, like `ip route replace`.
func (t *Table) Replace(r Route) error {
	if err := check(&r); err != nil {
		return err
	}
	t.Delete(r.Dst, r.Metric)
	return t.Add(r)
}

func check(r *Route) error {
	if !r.Dst.IsValid() || !r.Dst.Addr().Is4() {
		return &Error{Op: "add", Route: fmt.Sprint(r.Dst), Msg: "destination must be an IPv4 prefix"}
	}
	if r.Dst.Masked() != r.Dst {
		return &Error{Op: "add", Route: r.Dst.String(), Msg: "Error: Invalid prefix for given prefix length."}
	}
	if r.Gw.IsValid() && !r.Gw.Is4() {
		return &Error{Op: "add", Route: r.Dst.String(), Msg: "gateway must be IPv4"}
	}
	if r.Type == Unicast && r.Dev == 0 {
		return &Error{Op: "add", Route: r.Dst.String(), Msg: "no output device"}
	}
	return nil
}

// Delete removes the route for dst with the given metric (metric < 0: the
// first one). It reports whether a route was removed.
func (t *Table) Delete(dst netip.Prefix, metric int) bool {
	bits := dst.Bits()
	if bits < 0 {
		return false
	}
	t.touch(dst)
	removed, last := t.remove(dst, metric)
	if !removed {
		return false
	}
	t.n--
	t.bump()
	if t.shared != nil && last {
		t.shared.unclaim(t, dst)
	}
	return true
}

// DeleteDev removes every route through device index dev (what the kernel
// does when a device goes away).
func (t *Table) DeleteDev(dev int) {
	if t.shared != nil && t.shared.n > 0 && t.shared.Dev == dev {
		t.unshareNow()
	}
	for _, r := range t.List() {
		if r.Dev == dev {
			t.Delete(r.Dst, r.Metric)
		}
	}
}

// Get returns the route for exactly dst with the given metric.
func (t *Table) Get(dst netip.Prefix, metric int) (Route, bool) {
	bits := dst.Bits()
	if bits < 0 || !dst.Addr().Is4() {
		return Route{}, false
	}
	for _, r := range t.own(bits, key(dst.Addr().As4(), bits)) {
		if r.Metric == metric {
			return r, true
		}
	}
	if r := t.sharedAt(dst); r != nil && r.Metric == metric {
		return *r, true
	}
	return Route{}, false
}

// Lookup returns the best route to dst: longest prefix, then lowest metric.
// The returned pointer is valid until the table is next modified.
func (t *Table) Lookup(dst [4]byte) (*Route, bool) {
	if t.shared != nil {
		return t.lookupShared(dst)
	}
	if t.isSmall() {
		// Longest prefix first, lowest metric first within one.
		for i := range t.small {
			r := &t.small[i]
			if bits := r.Dst.Bits(); key(dst, bits) == key(r.Dst.Addr().As4(), bits) {
				return r, true
			}
		}
		return nil, false
	}
	lens := t.lens
	for bits := 32; bits >= 0; bits-- {
		if lens&(1<<bits) == 0 {
			continue
		}
		if rs, ok := t.byLen[bits][key(dst, bits)]; ok {
			return &rs[0], true
		}
	}
	return nil, false
}

// lookupShared is Lookup over this table's routes and the shared ones it
// holds: the longest prefix of either; for one prefix in both (a route of
// this table with a higher metric than the shared one's 0), the lowest
// metric.
func (t *Table) lookupShared(dst [4]byte) (*Route, bool) {
	s := t.shared
	lens := t.lens | s.lens
	for bits := 32; bits >= 0; bits-- {
		if lens&(1<<bits) == 0 {
			continue
		}
		k := key(dst, bits)
		rs := t.own(bits, k)
		ok := len(rs) > 0
		if sr := s.byLen[bits][k]; sr != nil && !(t.skip.IsValid() && t.skip == sr.Dst) {
			if !ok || sr.Metric <= rs[0].Metric {
				return sr, true
			}
		}
		if ok {
			return &rs[0], true
		}
	}
	return nil, false
}

// Len is the number of routes.
func (t *Table) Len() int {
	n := t.n
	if t.shared != nil {
		n += t.shared.n
		if t.skip.IsValid() && t.shared.has(t.skip) {
			n--
		}
	}
	return n
}

// List returns the routes in the order `ip route show` prints them: by
// destination address, shorter prefixes first for the same address, then
// by metric.
func (t *Table) List() []Route {
	out := make([]Route, 0, t.Len())
	t.eachPrefix(func(rs []Route) { out = append(out, rs...) })
	if s := t.shared; s != nil {
		for _, m := range s.byLen {
			for _, r := range m {
				if r.Dst != t.skip {
					out = append(out, *r)
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b Route) int {
		if c := a.Dst.Addr().Compare(b.Dst.Addr()); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Dst.Bits(), b.Dst.Bits()); c != 0 {
			return c
		}
		return cmp.Compare(a.Metric, b.Metric)
	})
	return out
}

// touch is called before a change at dst: when dst is a shared route this
// table holds, the table takes its own copies first (copy on write).
func (t *Table) touch(dst netip.Prefix) {
	if t.shared != nil && t.sharedAt(dst) != nil {
		t.unshareNow()
	}
}

func (t *Table) unshareNow() {
	if t.unshare != nil {
		t.unshare()
	} else {
		t.Unshare()
	}
}

// sharedAt is the shared route for exactly dst this table holds, or nil.
func (t *Table) sharedAt(dst netip.Prefix) *Route {
	if t.shared == nil || !dst.IsValid() || !dst.Addr().Is4() || (t.skip.IsValid() && dst == t.skip) {
		return nil
	}
	bits := dst.Bits()
	return t.shared.byLen[bits][key(dst.Addr().As4(), bits)]
}

// Shared is a set of routes (one per destination, metric 0) that many
// tables hold without a copy each: flannel's mesh, where every node routes
// every other node's subnet the same way. A table attached to it (Share)
// answers Lookup, Get, List and Len as if it held each shared route but
// the one at its skip prefix; a change to the table at a shared
// destination first gives the table its own copies (Unshare), as does a
// shared route appearing where the table has one of its own.
type Shared struct {
	// Dev is the output device index of the shared routes: deleting it
	// from a table (DeleteDev) unshares first.
	Dev    int
	byLen  [33]map[uint32]*Route
	lens   uint64
	n      int
	gen    uint64
	claims map[netip.Prefix][]*Table
	// notify are the counters of the tables sharing s (Table.SetNotify),
	// each once: a change of s increments each.
	notify []*uint64
}

func (s *Shared) notifyTo(g *uint64) {
	if g != nil && !slices.Contains(s.notify, g) {
		s.notify = append(s.notify, g)
	}
}

// bump changes s's generation, and so that of every table holding it.
func (s *Shared) bump() {
	s.gen++
	for _, g := range s.notify {
		*g++
	}
}

func (s *Shared) has(dst netip.Prefix) bool {
	bits := dst.Bits()
	return bits >= 0 && s.byLen[bits][key(dst.Addr().As4(), bits)] != nil
}

// claim records that t has a route of its own for dst. A table may be
// listed more than once (a route per metric); unclaim removes them all.
// Many tables claim the same default and segment routes: no search here.
func (s *Shared) claim(t *Table, dst netip.Prefix) {
	if s.claims == nil {
		s.claims = map[netip.Prefix][]*Table{}
	}
	s.claims[dst] = append(s.claims[dst], t)
}

func (s *Shared) unclaim(t *Table, dst netip.Prefix) {
	c := slices.DeleteFunc(s.claims[dst], func(x *Table) bool { return x == t })
	if len(c) == 0 {
		delete(s.claims, dst)
	} else {
		s.claims[dst] = c
	}
}

// Put adds or replaces the shared route for r.Dst (metric 0). Tables
// holding it that have a route of their own for r.Dst are unshared first,
// so that they see what `ip route replace` would have made of theirs.
func (s *Shared) Put(r Route) error {
	if err := check(&r); err != nil {
		return err
	}
	r.Metric = 0
	for _, t := range slices.Clone(s.claims[r.Dst]) {
		if !(t.skip.IsValid() && t.skip == r.Dst) {
			t.unshareNow()
		}
	}
	bits := r.Dst.Bits()
	k := key(r.Dst.Addr().As4(), bits)
	if s.byLen[bits] == nil {
		s.byLen[bits] = map[uint32]*Route{}
	}
	if s.byLen[bits][k] == nil {
		s.n++
	}
	s.byLen[bits][k] = &r
	s.lens |= 1 << bits
	s.bump()
	return nil
}

// Remove deletes the shared route for dst, reporting whether there was one.
func (s *Shared) Remove(dst netip.Prefix) bool {
	if !s.has(dst) {
		return false
	}
	bits := dst.Bits()
	delete(s.byLen[bits], key(dst.Addr().As4(), bits))
	if len(s.byLen[bits]) == 0 {
		s.lens &^= 1 << bits
	}
	s.n--
	s.bump()
	return true
}

// Get returns the shared route for exactly dst.
func (s *Shared) Get(dst netip.Prefix) (Route, bool) {
	if !dst.IsValid() || !dst.Addr().Is4() || !s.has(dst) {
		return Route{}, false
	}
	bits := dst.Bits()
	return *s.byLen[bits][key(dst.Addr().As4(), bits)], true
}

// Len is the number of shared routes.
func (s *Shared) Len() int { return s.n }

// Share makes t hold s's routes except the one for skip (invalid: none).
// unshare, when not nil, is called instead of Unshare when a change needs
// t to have its own copies (its owner copies other shared state too).
func (t *Table) Share(s *Shared, skip netip.Prefix, unshare func()) {
	t.shared, t.skip, t.unshare = s, skip, unshare
	s.notifyTo(t.notify)
	t.bump()
	t.eachPrefix(func(rs []Route) { s.claim(t, rs[0].Dst) })
}

// SetSkip changes the shared route t does not hold.
func (t *Table) SetSkip(skip netip.Prefix) {
	if t.skip != skip {
		t.skip = skip
		t.bump()
	}
}

// Shared reports whether t holds a Shared table's routes.
func (t *Table) Shared() bool { return t.shared != nil }

// Unshare gives t its own copy of every shared route it holds and detaches
// it from the shared table: nothing it shows or answers changes.
func (t *Table) Unshare() {
	s := t.shared
	if s == nil {
		return
	}
	g := t.Gen()
	var own []Route
	for _, m := range s.byLen {
		for _, r := range m {
			if r.Dst != t.skip {
				own = append(own, *r)
			}
		}
	}
	t.eachPrefix(func(rs []Route) { s.unclaim(t, rs[0].Dst) })
	t.shared, t.unshare = nil, nil
	for _, r := range own {
		t.insert(r)
		t.n++
	}
	t.gen = g
	t.bump()
}
