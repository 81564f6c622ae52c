// Package ipset models the kernel's IP sets (ip_set, ipset v7 with kernel
// 6.x set revisions) of the five types kube-proxy's IPVS mode creates:
// hash:ip, hash:ip,port, hash:ip,port,ip, hash:ip,port,net and
// bitmap:port, plus hash:net. It holds the sets of one network namespace
// ([Registry]), takes `ipset create/add/del/test/flush/destroy` commands
// with the real tool's error messages, answers membership tests for the
// iptables `-m set` match without allocating, and prints `ipset list` and
// `ipset save` in the tool's layout.
//
// # Checked against the kernel
//
// `ipset list` output was compared with ipset v7.17 on Linux 6.18 in a
// network namespace (see ipset_kernel_test.go). What differs, and why:
//
//   - Members of hash sets are listed in hash-bucket order by the kernel,
//     which depends on a per-set random initval; kubewalk lists them sorted
//     (addresses numerically), so listings are stable and diffable.
//     Bitmap members are listed ascending, as the kernel does.
//   - initval is random per set in the kernel; kubewalk derives it from the
//     set name (FNV-1a), so it is stable. Tests mask it.
//   - "Size in memory" follows the sizes measured on this kernel: a fixed
//     part per type plus one element slot per member (no two members in one
//     bucket), plus 16+len+1 bytes per comment string. With hash collisions
//     the kernel's figure grows in bucket-sized steps that kubewalk does not
//     model.
//   - Timeouts, counters, skbinfo and the nomatch flag are not modelled.
package ipset

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Type is a set type as `ipset create` names it.
type Type string

// Set types kube-proxy's IPVS mode uses, with hash:net.
const (
	HashIP        Type = "hash:ip"
	HashIPPort    Type = "hash:ip,port"
	HashIPPortIP  Type = "hash:ip,port,ip"
	HashIPPortNet Type = "hash:ip,port,net"
	HashNet       Type = "hash:net"
	BitmapPort    Type = "bitmap:port"
)

// typeInfo is what `ipset list` shows per type (the revision of the kernel
// module on Linux 6.18) and the measured memory figures.
type typeInfo struct {
	revision   int
	dims       int
	base       int // Size in memory of an empty set (hash types)
	elem       int // bytes per member without extensions
	elemCmt    int // bytes per member with the comment extension
	hasPort    bool
	hasNet     bool // last dimension is a net (with a prefix length)
	secondAddr bool // hash:ip,port,ip
}

var types = map[Type]typeInfo{
	HashIP:        {revision: 6, dims: 1, base: 216, elem: 40, elemCmt: 64},
	HashIPPort:    {revision: 7, dims: 2, base: 216, elem: 48, elemCmt: 64, hasPort: true},
	HashIPPortIP:  {revision: 6, dims: 3, base: 208, elem: 56, elemCmt: 80, hasPort: true, secondAddr: true},
	HashIPPortNet: {revision: 8, dims: 3, base: 464, elem: 56, elemCmt: 80, hasPort: true, hasNet: true},
	HashNet:       {revision: 7, dims: 1, base: 456, elem: 48, elemCmt: 64, hasNet: true},
	BitmapPort:    {revision: 3, dims: 1},
}

// Error is an ipset failure, worded as the ipset tool prints it after its
// "ipset v7.17: " prefix.
type Error struct {
	Msg string
}

// Error implements the error interface.
func (e *Error) Error() string { return "ipset v7.17: " + e.Msg }

func errorf(format string, a ...any) error { return &Error{Msg: fmt.Sprintf(format, a...)} }

// Entry is one member. Which fields are used depends on the set type: IP
// (first dimension), Proto and Port (hash:*,port and bitmap:port), IP2
// (hash:ip,port,ip), Net (hash:ip,port,net and hash:net; hash:net keeps
// its prefix here and IP unused).
type Entry struct {
	IP    [4]byte
	Proto uint8
	Port  uint16
	IP2   [4]byte
	Bits  uint8 // prefix length of the net dimension
}

type member struct {
	e       Entry
	comment string
	hasCmt  bool
}

// Set is one IP set.
type Set struct {
	Name string
	Type Type
	// HashSize and MaxElem are the hash parameters (defaults 1024, 65536).
	HashSize, MaxElem int
	// Comment is set when the set was created with the comment extension.
	Comment bool
	// PortFrom and PortTo are a bitmap:port set's range.
	PortFrom, PortTo uint16

	info    typeInfo
	m       map[Entry]*member
	bits    []uint64 // bitmap:port
	nbits   int
	cidrs   [33]int // members per prefix length of the net dimension
	initval uint32
	reg     *Registry
}

// Len is the number of members.
func (s *Set) Len() int {
	if s.Type == BitmapPort {
		return s.nbits
	}
	return len(s.m)
}

// Registry holds the sets of one network namespace.
type Registry struct {
	sets  map[string]*Set
	order []*Set
	// References, when set, returns how many kernel objects (iptables
	// rules) use a set: `ipset list` prints it and destroy refuses a set
	// in use. The netfilter package installs it.
	References func(name string) int
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{sets: map[string]*Set{}} }

// Get returns the set named name, or nil.
func (r *Registry) Get(name string) *Set { return r.sets[name] }

// Sets returns the sets in creation order (the order `ipset list` uses).
func (r *Registry) Sets() []*Set { return slices.Clone(r.order) }

func (r *Registry) refs(name string) int {
	if r.References == nil {
		return 0
	}
	return r.References(name)
}

// Create is `ipset create NAME TYPE [options]` (options: family inet,
// hashsize N, maxelem N, comment for hash types; range A-B and comment for
// bitmap:port). With exist, an identical existing set is not an error.
func (r *Registry) Create(name string, typ Type, opts []string, exist bool) error {
	if name == "" || len(name) > 31 {
		return errorf("Syntax error: setname '%s' is longer than 31 characters", name)
	}
	info, ok := types[typ]
	if !ok {
		return errorf("Syntax error: typename '%s' is unknown", typ)
	}
	s := &Set{Name: name, Type: typ, HashSize: 1024, MaxElem: 65536, info: info, m: map[Entry]*member{}}
	haveRange := false
	for i := 0; i < len(opts); i++ {
		o := opts[i]
		val := func() (string, error) {
			if i+1 >= len(opts) {
				return "", errorf("Syntax error: option %s requires an argument", o)
			}
			i++
			return opts[i], nil
		}
		switch {
		case o == "comment":
			s.Comment = true
		case o == "family" && typ != BitmapPort:
			v, err := val()
			if err != nil {
				return err
			}
			if v != "inet" && v != "ipv4" {
				return errorf("Syntax error: Unknown family %s (only inet is modelled)", v)
			}
		case (o == "hashsize" || o == "maxelem") && typ != BitmapPort:
			v, err := val()
			if err != nil {
				return err
			}
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return errorf("Syntax error: '%s' is invalid as number", v)
			}
			if o == "hashsize" {
				s.HashSize = int(n)
			} else {
				s.MaxElem = int(n)
			}
		case o == "range" && typ == BitmapPort:
			v, err := val()
			if err != nil {
				return err
			}
			a, b, ok := strings.Cut(v, "-")
			lo, e1 := strconv.ParseUint(a, 10, 16)
			hi, e2 := strconv.ParseUint(b, 10, 16)
			if !ok || e1 != nil || e2 != nil {
				return errorf("Syntax error: cannot parse '%s' as a port range", v)
			}
			if lo > hi {
				lo, hi = hi, lo
			}
			s.PortFrom, s.PortTo = uint16(lo), uint16(hi)
			haveRange = true
		default:
			return errorf("Unknown argument: `%s'", o)
		}
	}
	if typ == BitmapPort {
		if !haveRange {
			return errorf("Syntax error: Missing mandatory option \"range\"")
		}
		s.bits = make([]uint64, (int(s.PortTo)-int(s.PortFrom))/64+1)
	}
	if s.HashSize < 64 {
		s.HashSize = 64 // the kernel rounds up to its minimum
	}
	s.HashSize = 1 << bitsFor(s.HashSize)
	if old := r.sets[name]; old != nil {
		if exist && old.Type == s.Type && old.Comment == s.Comment && old.HashSize == s.HashSize &&
			old.MaxElem == s.MaxElem && old.PortFrom == s.PortFrom && old.PortTo == s.PortTo {
			return nil
		}
		return errorf("Set cannot be created: set with the same name already exists")
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	s.initval = h.Sum32()
	s.reg = r
	r.sets[name] = s
	r.order = append(r.order, s)
	return nil
}

func bitsFor(n int) int {
	b := 0
	for 1<<b < n {
		b++
	}
	return b
}

// Destroy is `ipset destroy NAME`; a set referenced by an iptables rule
// cannot be destroyed.
func (r *Registry) Destroy(name string) error {
	s := r.sets[name]
	if s == nil {
		return errorf("The set with the given name does not exist")
	}
	if r.refs(name) > 0 {
		return errorf("Set cannot be destroyed: it is in use by a kernel component")
	}
	delete(r.sets, name)
	r.order = slices.DeleteFunc(r.order, func(x *Set) bool { return x == s })
	return nil
}

// Flush is `ipset flush NAME`.
func (r *Registry) Flush(name string) error {
	s := r.sets[name]
	if s == nil {
		return errorf("The set with the given name does not exist")
	}
	s.m = map[Entry]*member{}
	s.cidrs = [33]int{}
	if s.bits != nil {
		clear(s.bits)
		s.nbits = 0
	}
	return nil
}

// Add is `ipset add NAME ENTRY [comment "text"]`; with exist, adding a
// member already present is not an error.
func (r *Registry) Add(name, entry, comment string, hasComment, exist bool) error {
	s := r.sets[name]
	if s == nil {
		return errorf("The set with the given name does not exist")
	}
	e, err := s.ParseEntry(entry)
	if err != nil {
		return err
	}
	if hasComment && !s.Comment {
		return errorf("Kernel error received: ipset protocol error")
	}
	if s.Type == BitmapPort {
		if s.testBit(e.Port) {
			if exist {
				return nil
			}
			return errorf("Element cannot be added to the set: it's already added")
		}
		s.setBit(e.Port, true)
		return nil
	}
	if m, ok := s.m[e]; ok {
		if exist {
			m.comment, m.hasCmt = comment, hasComment
			return nil
		}
		return errorf("Element cannot be added to the set: it's already added")
	}
	if len(s.m) >= s.MaxElem {
		return errorf("Hash is full, cannot add more elements")
	}
	s.m[e] = &member{e: e, comment: comment, hasCmt: hasComment}
	if s.info.hasNet {
		s.cidrs[e.Bits]++
	}
	return nil
}

// Del is `ipset del NAME ENTRY`; with exist, deleting a missing member is
// not an error.
func (r *Registry) Del(name, entry string, exist bool) error {
	s := r.sets[name]
	if s == nil {
		return errorf("The set with the given name does not exist")
	}
	e, err := s.ParseEntry(entry)
	if err != nil {
		return err
	}
	if s.Type == BitmapPort {
		if !s.testBit(e.Port) {
			if exist {
				return nil
			}
			return errorf("Element cannot be deleted from the set: it's not added")
		}
		s.setBit(e.Port, false)
		return nil
	}
	if _, ok := s.m[e]; !ok {
		if exist {
			return nil
		}
		return errorf("Element cannot be deleted from the set: it's not added")
	}
	delete(s.m, e)
	if s.info.hasNet {
		s.cidrs[e.Bits]--
	}
	return nil
}

// Test is `ipset test NAME ENTRY`: whether the member is in the set.
func (r *Registry) Test(name, entry string) (bool, error) {
	s := r.sets[name]
	if s == nil {
		return false, errorf("The set with the given name does not exist")
	}
	e, err := s.ParseEntry(entry)
	if err != nil {
		return false, err
	}
	if s.Type == BitmapPort {
		return s.testBit(e.Port), nil
	}
	if s.info.hasNet {
		return s.matchNet(e), nil
	}
	_, ok := s.m[e]
	return ok, nil
}

func (s *Set) testBit(port uint16) bool {
	if port < s.PortFrom || port > s.PortTo {
		return false
	}
	i := int(port - s.PortFrom)
	return s.bits[i/64]&(1<<(i%64)) != 0
}

func (s *Set) setBit(port uint16, on bool) {
	i := int(port - s.PortFrom)
	was := s.bits[i/64]&(1<<(i%64)) != 0
	if on && !was {
		s.bits[i/64] |= 1 << (i % 64)
		s.nbits++
	} else if !on && was {
		s.bits[i/64] &^= 1 << (i % 64)
		s.nbits--
	}
}

func mask(a [4]byte, bits uint8) [4]byte {
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	if bits == 0 {
		v = 0
	} else {
		v &= ^uint32(0) << (32 - bits)
	}
	return [4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
}

// matchNet tests e against the members with each prefix length present,
// longest first, as the kernel's hash:*net types walk their nets[] array.
func (s *Set) matchNet(e Entry) bool {
	for b := 32; b >= 0; b-- {
		if s.cidrs[b] == 0 {
			continue
		}
		k := e
		k.Bits = uint8(b)
		if s.Type == HashNet {
			k.IP = mask(e.IP, uint8(b))
		} else {
			k.IP2 = mask(e.IP2, uint8(b))
		}
		if _, ok := s.m[k]; ok {
			return true
		}
	}
	return false
}

// Match reports whether a packet's values are in the set: ip, proto and
// port for the first two dimensions, ip2 for the third (an address for
// hash:ip,port,ip, matched by prefix for hash:ip,port,net). For hash:net
// only ip is used; for bitmap:port only port (of a TCP, UDP or SCTP
// packet). It allocates nothing.
func (s *Set) Match(ip [4]byte, proto uint8, port uint16, ip2 [4]byte) bool {
	switch s.Type {
	case BitmapPort:
		return s.testBit(port)
	case HashIP:
		_, ok := s.m[Entry{IP: ip}]
		return ok
	case HashIPPort:
		_, ok := s.m[Entry{IP: ip, Proto: proto, Port: port}]
		return ok
	case HashIPPortIP:
		_, ok := s.m[Entry{IP: ip, Proto: proto, Port: port, IP2: ip2}]
		return ok
	case HashIPPortNet:
		return s.matchNet(Entry{IP: ip, Proto: proto, Port: port, IP2: ip2})
	case HashNet:
		return s.matchNet(Entry{IP: ip})
	}
	return false
}

// Dimensions returns how many values a `--match-set` direction list must
// give for the set's type.
func (s *Set) Dimensions() int { return s.info.dims }

// HasPort reports whether the set's second dimension is a port (the
// match then needs a TCP/UDP/SCTP header).
func (s *Set) HasPort() bool { return s.info.hasPort || s.Type == BitmapPort }

var protoByName = map[string]uint8{"tcp": 6, "udp": 17, "sctp": 132, "icmp": 1}

func protoName(p uint8) string {
	for k, v := range protoByName {
		if v == p {
			return k
		}
	}
	return strconv.Itoa(int(p))
}

func parseIP(s string) ([4]byte, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return [4]byte{}, errorf("Syntax error: cannot parse %s: resolving to IPv4 address failed", s)
	}
	return a.As4(), nil
}

func parsePort(s string) (uint8, uint16, error) {
	proto := uint8(6)
	if p, port, ok := strings.Cut(s, ":"); ok {
		v, found := protoByName[p]
		if !found {
			return 0, 0, errorf("Syntax error: cannot parse '%s' as a protocol", p)
		}
		proto, s = v, port
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, 0, errorf("Syntax error: cannot parse '%s' as a %s port", s, protoName(proto))
	}
	return proto, uint16(n), nil
}

func parseNet(s string) ([4]byte, uint8, error) {
	addr, bits := s, 32
	if a, b, ok := strings.Cut(s, "/"); ok {
		n, err := strconv.Atoi(b)
		if err != nil || n < 1 || n > 32 {
			return [4]byte{}, 0, errorf("Syntax error: '%s' is out of range 1-32", b)
		}
		addr, bits = a, n
	}
	ip, err := parseIP(addr)
	if err != nil {
		return ip, 0, err
	}
	return mask(ip, uint8(bits)), uint8(bits), nil
}

// ParseEntry parses a member as `ipset add` takes it for the set's type:
// "10.96.0.1" (hash:ip), "10.0.0.0/8" (hash:net), "10.96.0.1,tcp:443"
// (hash:ip,port), "10.244.1.3,tcp:80,10.244.1.3" (hash:ip,port,ip),
// "192.168.1.1,tcp:80,10.0.0.0/8" (hash:ip,port,net), "30080"
// (bitmap:port).
func (s *Set) ParseEntry(text string) (Entry, error) {
	parts := strings.Split(text, ",")
	var e Entry
	if len(parts) != s.info.dims {
		return e, errorf("Syntax error: Elem separator in %s, but settype %s supports none.", text, s.Type)
	}
	var err error
	switch s.Type {
	case BitmapPort:
		n, perr := strconv.ParseUint(parts[0], 10, 16)
		if perr != nil {
			return e, errorf("Syntax error: cannot parse '%s' as a port", parts[0])
		}
		e.Port = uint16(n)
		if e.Port < s.PortFrom || e.Port > s.PortTo {
			return e, errorf("Element is out of the range of the set")
		}
	case HashNet:
		e.IP, e.Bits, err = parseNet(parts[0])
	default:
		if e.IP, err = parseIP(parts[0]); err != nil {
			return e, err
		}
		if s.info.hasPort {
			if e.Proto, e.Port, err = parsePort(parts[1]); err != nil {
				return e, err
			}
		}
		if s.Type == HashIPPortIP {
			e.IP2, err = parseIP(parts[2])
		} else if s.Type == HashIPPortNet {
			e.IP2, e.Bits, err = parseNet(parts[2])
		}
	}
	return e, err
}

func addr(a [4]byte) string { return netip.AddrFrom4(a).String() }

// format prints a member as `ipset list` does.
func (s *Set) format(e Entry) string {
	switch s.Type {
	case BitmapPort:
		return strconv.Itoa(int(e.Port))
	case HashIP:
		return addr(e.IP)
	case HashNet:
		return netString(e.IP, e.Bits)
	}
	out := addr(e.IP) + "," + protoName(e.Proto) + ":" + strconv.Itoa(int(e.Port))
	switch s.Type {
	case HashIPPortIP:
		out += "," + addr(e.IP2)
	case HashIPPortNet:
		out += "," + netString(e.IP2, e.Bits)
	}
	return out
}

// netString prints a net dimension; ipset leaves /32 off host nets.
func netString(a [4]byte, bits uint8) string {
	if bits == 32 {
		return addr(a)
	}
	return addr(a) + "/" + strconv.Itoa(int(bits))
}

func be(a [4]byte) uint32 {
	return uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
}

// members returns the members sorted: addresses numerically, then
// protocol, port, second address and prefix length.
func (s *Set) members() []*member {
	if s.Type == BitmapPort {
		var out []*member
		for p := int(s.PortFrom); p <= int(s.PortTo); p++ {
			if s.testBit(uint16(p)) {
				out = append(out, &member{e: Entry{Port: uint16(p)}})
			}
		}
		return out
	}
	out := make([]*member, 0, len(s.m))
	for _, m := range s.m {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *member) int {
		return cmp.Or(cmp.Compare(be(a.e.IP), be(b.e.IP)), cmp.Compare(a.e.Proto, b.e.Proto),
			cmp.Compare(a.e.Port, b.e.Port), cmp.Compare(be(a.e.IP2), be(b.e.IP2)), cmp.Compare(a.e.Bits, b.e.Bits))
	})
	return out
}

func (s *Set) header() string {
	if s.Type == BitmapPort {
		h := "range " + strconv.Itoa(int(s.PortFrom)) + "-" + strconv.Itoa(int(s.PortTo))
		if s.Comment {
			h += " comment"
		}
		return h
	}
	h := "family inet hashsize " + strconv.Itoa(s.HashSize) + " maxelem " + strconv.Itoa(s.MaxElem)
	if s.Comment {
		h += " comment"
	}
	return h + fmt.Sprintf(" bucketsize 12 initval %#x", s.initval)
}

// memSize is the "Size in memory" line (see the package notes).
func (s *Set) memSize() int {
	if s.Type == BitmapPort {
		n := int(s.PortTo) - int(s.PortFrom) + 1
		size := 72 + (n+63)/64*8
		if s.Comment {
			size += n * 8
		}
		return size
	}
	per := s.info.elem
	if s.Comment {
		per = s.info.elemCmt
	}
	size := s.info.base + per*len(s.m)
	for _, m := range s.m {
		if m.hasCmt && m.comment != "" {
			size += 16 + len(m.comment) + 1
		}
	}
	return size
}

func (s *Set) memberLine(m *member) string {
	line := s.format(m.e)
	if s.Comment && m.hasCmt {
		line += ` comment "` + m.comment + `"`
	}
	return line
}

// Entries returns the members as `ipset add` takes them, in listing order.
func (s *Set) Entries() []string {
	ms := s.members()
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = s.format(m.e)
	}
	return out
}

// List is `ipset list NAME`.
func (s *Set) List() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Name: %s\nType: %s\nRevision: %d\nHeader: %s\nSize in memory: %d\nReferences: %d\nNumber of entries: %d\nMembers:\n",
		s.Name, s.Type, s.info.revision, s.header(), s.memSize(), s.reg.refs(s.Name), s.Len())
	for _, m := range s.members() {
		b.WriteString(s.memberLine(m))
		b.WriteByte('\n')
	}
	return b.String()
}

// List is `ipset list`: every set, separated by a blank line.
func (r *Registry) List() string {
	parts := make([]string, len(r.order))
	for i, s := range r.order {
		parts[i] = s.List()
	}
	return strings.Join(parts, "\n")
}

// Save is `ipset save`: create lines followed by each set's add lines.
func (r *Registry) Save() string {
	var b strings.Builder
	for _, s := range r.order {
		fmt.Fprintf(&b, "create %s %s %s\n", s.Name, s.Type, s.header())
		for _, m := range s.members() {
			fmt.Fprintf(&b, "add %s %s\n", s.Name, s.memberLine(m))
		}
	}
	return b.String()
}

// Exec runs one ipset command line's words (without the leading "ipset"):
// create, add, del, test, flush, destroy, with -exist (or -!) anywhere.
func (r *Registry) Exec(args ...string) error {
	exist := false
	var w []string
	for _, a := range args {
		if a == "-exist" || a == "-!" {
			exist = true
			continue
		}
		w = append(w, a)
	}
	if len(w) == 0 {
		return errorf("No command specified.")
	}
	need := func(n int) error {
		if len(w) < n {
			return errorf("Syntax error: missing arguments for %s", w[0])
		}
		return nil
	}
	switch w[0] {
	case "create", "n", "-N":
		if err := need(3); err != nil {
			return err
		}
		return r.Create(w[1], Type(w[2]), w[3:], exist)
	case "add", "-A", "del", "-D", "test", "-T":
		if err := need(3); err != nil {
			return err
		}
		comment, hasCmt := "", false
		rest := w[3:]
		if len(rest) >= 2 && rest[0] == "comment" {
			comment, hasCmt = strings.Trim(rest[1], `"`), true
			rest = rest[2:]
		}
		if len(rest) > 0 {
			return errorf("Unknown argument: `%s'", rest[0])
		}
		switch w[0] {
		case "add", "-A":
			return r.Add(w[1], w[2], comment, hasCmt, exist)
		case "del", "-D":
			return r.Del(w[1], w[2], exist)
		}
		ok, err := r.Test(w[1], w[2])
		if err == nil && !ok {
			return errorf("%s is NOT in set %s.", w[2], w[1])
		}
		return err
	case "flush", "-F":
		if err := need(2); err != nil {
			return err
		}
		return r.Flush(w[1])
	case "destroy", "x", "-X":
		if err := need(2); err != nil {
			return err
		}
		return r.Destroy(w[1])
	}
	return errorf("No command specified: unknown argument %s", w[0])
}
