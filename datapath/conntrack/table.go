package conntrack

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"time"

	"github.com/kubewalk/kubewalk/datapath"
)

// Timeouts are the protocol timeouts (net.netfilter.nf_conntrack_*_timeout*
// sysctls). DefaultTimeouts returns the kernel's defaults.
type Timeouts struct {
	TCPSynSent, TCPSynRecv, TCPEstablished, TCPFinWait, TCPCloseWait,
	TCPLastAck, TCPTimeWait, TCPClose time.Duration
	// TCPUnacknowledged caps the timeout of an ESTABLISHED connection picked
	// up mid-stream that has not seen a reply (nf_conntrack_tcp_timeout_unacknowledged).
	TCPUnacknowledged time.Duration
	// UDP is nf_conntrack_udp_timeout (unreplied, or replied but younger
	// than 2 s); UDPStream is nf_conntrack_udp_timeout_stream.
	UDP, UDPStream time.Duration
	ICMP           time.Duration
	// SCTP is nf_conntrack_sctp_timeout_cookie_wait, the timeout of an
	// SCTP association that has not seen a reply; SCTPEstablished is
	// nf_conntrack_sctp_timeout_established (210 s since Linux 6.1). The
	// SCTP tracker is minimal: no chunk state machine, COOKIE_WAIT until
	// a reply is seen, ESTABLISHED and ASSURED after.
	SCTP, SCTPEstablished time.Duration
	// Generic is nf_conntrack_generic_timeout, for other protocols.
	Generic time.Duration
}

// DefaultTimeouts returns the kernel's default timeouts.
func DefaultTimeouts() Timeouts {
	return Timeouts{
		TCPSynSent: 120 * time.Second, TCPSynRecv: 60 * time.Second,
		TCPEstablished: 432000 * time.Second, TCPFinWait: 120 * time.Second,
		TCPCloseWait: 60 * time.Second, TCPLastAck: 30 * time.Second,
		TCPTimeWait: 120 * time.Second, TCPClose: 10 * time.Second,
		TCPUnacknowledged: 300 * time.Second,
		UDP:               30 * time.Second, UDPStream: 120 * time.Second,
		ICMP: 30 * time.Second, Generic: 600 * time.Second,
		SCTP: 3 * time.Second, SCTPEstablished: 210 * time.Second,
	}
}

func (to *Timeouts) tcp(s TCPState) time.Duration {
	switch s {
	case TCPSynSent, TCPSynSent2:
		return to.TCPSynSent
	case TCPSynRecv:
		return to.TCPSynRecv
	case TCPEstablished:
		return to.TCPEstablished
	case TCPFinWait:
		return to.TCPFinWait
	case TCPCloseWait:
		return to.TCPCloseWait
	case TCPLastAck:
		return to.TCPLastAck
	case TCPTimeWait:
		return to.TCPTimeWait
	}
	return to.TCPClose
}

// DefaultMax is the nf_conntrack_max used when Config.Max is zero: the
// value kube-proxy sets on a node with 8 CPUs (conntrack.maxPerCore 32768).
const DefaultMax = 262144

// DefaultBuckets is the nf_conntrack_buckets used when Config.Buckets is
// zero: the kernel's default on a machine with more than 4 GiB of memory
// (nf_conntrack_init_start), which kube-proxy leaves alone when it sets
// nf_conntrack_max to DefaultMax (it raises hashsize only below max/4).
const DefaultBuckets = 262144

// EvictionRange is NF_CT_EVICTION_RANGE: how many hash buckets early_drop
// scans, starting at the new connection's.
const EvictionRange = 8

// Config configures a conntrack table.
type Config struct {
	// Max is net.netfilter.nf_conntrack_max. When the table holds this many
	// connections, a packet that would create one runs early_drop: the
	// EvictionRange hash buckets from the new tuple's are scanned, and
	// every entry of the first bucket that has any that are confirmed,
	// not ASSURED and not dying is evicted; if none qualifies the packet
	// is dropped ("nf_conntrack: table full, dropping packet").
	// 0 means DefaultMax.
	Max int
	// Buckets is nf_conntrack_buckets (the hashsize module parameter),
	// the number of hash buckets early_drop's scan is counted in. 0 means
	// DefaultBuckets. The kernel hashes tuples with a per-boot random
	// seed; kubewalk uses a fixed hash, so which entries share a bucket
	// is deterministic but not the same as on a given real machine.
	Buckets int
	// Timeouts; the zero value means DefaultTimeouts().
	Timeouts *Timeouts
	// TCPLoose is nf_conntrack_tcp_loose (default 1): a TCP packet without
	// SYN may create an ESTABLISHED connection (mid-stream pickup).
	// Install sets it to true unless StrictTCP is set.
	StrictTCP bool
}

// Stats are the counters of `conntrack -S` that the model maintains.
type Stats struct {
	Found, New, Invalid, Drop, Insert, InsertFailed, Related uint64
	// EarlyDrop counts connections evicted by early_drop (early_drop=).
	EarlyDrop uint64
}

// Table is one network namespace's connection tracking table. Lookups are
// by Tuple in either direction (two index slots per connection) and
// allocate nothing. Expiry is evaluated lazily against virtual time: an expired
// entry is removed when a lookup, a listing or the full-table check meets
// it, which is indistinguishable from the kernel's garbage collector for
// anything that looks at the table.
//
// A Table is used from the engine's event loop only; it is not safe for
// concurrent use.
type Table struct {
	ns    *datapath.Netns
	max   int
	to    Timeouts
	loose bool
	idx   tupleIndex
	count int
	// first and last are the ends of the list of live connections in ID
	// (creation) order, the order of List and of the garbage collector.
	first, last *Entry
	// slab is where new entries are carved from, a batch at a time.
	slab     []Entry
	slabN    int // the size of the last slab
	nbuckets uint32
	// heads are the hash chains early_drop scans (each connection is in
	// the chain of its original and of its reply tuple, newest first, as
	// in the kernel's hlist). Built the first time the table is full and
	// kept up to date from then on; nil before.
	heads []hnode
	// recent caches the slots of tuples looked up lately (see find).
	recent [recentSlots]recentSlot
	// inserts counts index inserts; misses remembers tuples the index
	// did not hold when inserts had this value (see find).
	inserts  uint64
	misses   missMemo
	lookups  uint64 // Lookup calls (for tests)
	nextID   uint32
	rover    uint16
	Stats    Stats
	inStage  inStage
	cfmStage confirmStage
}

// NewTable returns a table for ns without registering any stage; Install does
// both.
func NewTable(ns *datapath.Netns, cfg Config) *Table {
	t := &Table{ns: ns, max: cfg.Max, to: DefaultTimeouts(), loose: !cfg.StrictTCP}
	if t.max <= 0 {
		t.max = DefaultMax
	}
	t.nbuckets = uint32(DefaultBuckets)
	if cfg.Buckets > 0 {
		t.nbuckets = uint32(cfg.Buckets)
	}
	if cfg.Timeouts != nil {
		t.to = *cfg.Timeouts
	}
	t.inStage.t = t
	t.cfmStage.t = t
	return t
}

// Stage names under which Install registers the conntrack stages.
const (
	StageIn      = "conntrack"
	StageConfirm = "conntrack-confirm"
)

// Install creates a table for ns and registers its stages the way
// nf_conntrack_ipv4 registers its hooks: conntrack-in at PREROUTING and
// OUTPUT (priority -200, after raw) and confirm at INPUT and POSTROUTING
// (the last priority).
func Install(ns *datapath.Netns, cfg Config) *Table {
	t := NewTable(ns, cfg)
	ns.AddHookStage(datapath.Prerouting, StageIn, datapath.PriorityConntrack, &t.inStage)
	ns.AddHookStage(datapath.Output, StageIn, datapath.PriorityConntrack, &t.inStage)
	ns.AddHookStage(datapath.Input, StageConfirm, datapath.PriorityConntrackConfirm, &t.cfmStage)
	ns.AddHookStage(datapath.Postrouting, StageConfirm, datapath.PriorityConntrackConfirm, &t.cfmStage)
	return t
}

// Netns returns the namespace the table belongs to.
func (t *Table) Netns() *datapath.Netns { return t.ns }

// Max returns nf_conntrack_max.
func (t *Table) Max() int { return t.max }

// SetMax sets nf_conntrack_max (existing entries are kept).
func (t *Table) SetMax(n int) { t.max = n }

// Timeouts returns the table's timeouts.
func (t *Table) Timeouts() Timeouts { return t.to }

func (t *Table) now() time.Duration { return t.ns.Engine().Now() }

// Len returns the number of live confirmed connections (nf_conntrack_count),
// reaping expired ones first.
func (t *Table) Len() int {
	t.gc(t.now())
	return t.count
}

// Lookup finds the live connection a tuple belongs to and whether the tuple
// is its reply direction.
func (t *Table) Lookup(tu Tuple) (*Entry, bool, bool) {
	t.lookups++
	s, ok := t.find(tu)
	if !ok {
		return nil, false, false
	}
	if s.e.expires <= t.now() {
		t.remove(s.e)
		return nil, false, false
	}
	return s.e, s.reply, true
}

// recentSlots is the size of the direct-mapped cache in front of the index.
const (
	recentBits  = 6
	recentSlots = 1 << recentBits
)

// recentSlot remembers which connection a tuple belonged to when last
// looked up. It stays right while that connection lives: a confirmed
// connection's tuples never change and no other live connection can take
// them (confirm refuses a clash), and remove marks it dying. So a slot
// whose entry is not dying answers exactly what the index would.
type recentSlot struct {
	tu    tupleKey
	reply bool
	e     *Entry
}

// tupleKey is a tuple packed into two words, compared in two
// instructions where comparing the struct took five loads and compares.
type tupleKey struct{ a, b uint64 }

func (tu *Tuple) key() tupleKey {
	return tupleKey{a: uint64(binary.LittleEndian.Uint32(tu.Src[:])) | uint64(binary.LittleEndian.Uint32(tu.Dst[:]))<<32,
		b: uint64(tu.Sport) | uint64(tu.Dport)<<16 | uint64(tu.Proto)<<32}
}

func (tu *Tuple) recentIndex() int {
	h := binary.LittleEndian.Uint32(tu.Src[:])*0x9e3779b1 ^ binary.LittleEndian.Uint32(tu.Dst[:])*0x85ebca6b ^
		(uint32(tu.Sport)<<16|uint32(tu.Dport)^uint32(tu.Proto))*0xc2b2ae35
	return int(h >> (32 - recentBits))
}

// find is the index lookup of tu (live or not), through the recent cache:
// the walk looks the same few tuples up at every hook of every packet.
func (t *Table) find(tu Tuple) (slot, bool) {
	c := &t.recent[tu.recentIndex()]
	k := tu.key()
	if c.e != nil && c.tu == k && c.e.Status&StatusDying == 0 {
		return slot{e: c.e, reply: c.reply}, true
	}
	if t.misses.has(t.inserts, k) {
		return slot{}, false
	}
	e, reply, ok := t.idx.lookup(&tu)
	if ok {
		*c = recentSlot{tu: k, reply: reply, e: e}
	} else {
		t.misses.add(t.inserts, k)
	}
	return slot{e: e, reply: reply}, ok
}

// slot is what find answers: the connection and whether the tuple is its
// reply direction.
type slot struct {
	e     *Entry
	reply bool
}

// missMemo remembers the last few tuples the index did not hold. Only an
// insert can make such a tuple present, so the memo holds while the
// table's insert count is unchanged: a new connection's tuples are looked
// up four or five times (conntrack-in, each NAT binding's clash check,
// confirm) and found absent each time; the memo answers all but the
// first of each.
type missMemo struct {
	inserts uint64
	n       int
	tu      [4]tupleKey
}

func (m *missMemo) has(inserts uint64, k tupleKey) bool {
	if m.inserts != inserts {
		return false
	}
	for i := range m.n {
		if m.tu[i] == k {
			return true
		}
	}
	return false
}

func (m *missMemo) add(inserts uint64, k tupleKey) {
	if m.inserts != inserts {
		m.inserts, m.n = inserts, 0
	}
	if m.n < len(m.tu) {
		m.tu[m.n] = k
		m.n++
	}
}

// taken reports whether a tuple is used by a live connection in either
// direction (nf_conntrack_tuple_taken).
func (t *Table) taken(tu Tuple) bool {
	_, _, ok := t.Lookup(tu)
	return ok
}

// replyTaken is e.used(e.Reply.Invert()), through the entry's memo when
// the tuple looked up is Reply itself (see Entry.free): a
// connection's two null bindings and its confirm look the same reply
// tuple up with no insert in between.
func (e *Entry) replyTaken() bool {
	t := e.t
	if e.Reply.Proto == datapath.ProtoICMP {
		// Inverting twice turns a type without an inverse into echo
		// request (used looks that up).
		if tu := e.Reply.Invert().Invert(); tu != e.Reply {
			return t.taken(tu)
		}
	}
	if e.knownFree(freeReply) {
		return false
	}
	if t.taken(e.Reply) {
		return true
	}
	e.markFree(freeReply)
	return false
}

func (t *Table) remove(e *Entry) {
	if e.Status&StatusConfirmed == 0 || e.Status&StatusDying != 0 {
		return
	}
	e.Status |= StatusDying
	t.idx.remove(e, 0)
	t.idx.remove(e, 1)
	t.idx.release(e)
	if t.heads != nil {
		t.unlink(e, 0)
		t.unlink(e, 1)
	}
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		t.first = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		t.last = e.prev
	}
	e.prev, e.next = nil, nil
	t.count--
}

// Kill removes a connection from the table (nf_ct_kill).
func (t *Table) Kill(e *Entry) { t.remove(e) }

func (t *Table) gc(now time.Duration) {
	for e := t.first; e != nil; {
		next := e.next
		if e.expires <= now {
			t.remove(e)
		}
		e = next
	}
}

// List returns the live connections sorted by ID (creation order). The
// kernel lists in hash order; a stable order keeps listings diffable.
func (t *Table) List() []*Entry {
	now := t.now()
	t.gc(now)
	out := make([]*Entry, 0, t.count)
	for e := t.first; e != nil; e = e.next {
		out = append(out, e)
	}
	return out
}

// Dump returns `conntrack -L` output: one line per connection, each ending
// in a newline. (The real tool's "N flow entries have been shown" summary
// goes to stderr and is not included.)
func (t *Table) Dump() string {
	var b strings.Builder
	now := t.now()
	for _, e := range t.List() {
		b.WriteString(e.Format(now))
		b.WriteByte('\n')
	}
	return b.String()
}

// Filter selects connections for Delete, like the options of
// `conntrack -D` (-p, --orig-src, --orig-dst, --reply-src, --reply-dst,
// --orig-port-src, ...). Zero fields match anything.
type Filter struct {
	Proto                                        uint8
	OrigSrc, OrigDst, ReplySrc, ReplyDst         netip.Addr
	OrigSport, OrigDport, ReplySport, ReplyDport uint16
	// Mark, when MarkSet, must equal the connection mark.
	Mark    uint32
	MarkSet bool
}

func addrOK(a netip.Addr, b [4]byte) bool { return !a.IsValid() || a == netip.AddrFrom4(b) }

func portOK(f, p uint16) bool { return f == 0 || f == p }

// Matches reports whether e is selected by f.
func (f *Filter) Matches(e *Entry) bool {
	return (f.Proto == 0 || f.Proto == e.Orig.Proto) &&
		addrOK(f.OrigSrc, e.Orig.Src) && addrOK(f.OrigDst, e.Orig.Dst) &&
		addrOK(f.ReplySrc, e.Reply.Src) && addrOK(f.ReplyDst, e.Reply.Dst) &&
		portOK(f.OrigSport, e.Orig.Sport) && portOK(f.OrigDport, e.Orig.Dport) &&
		portOK(f.ReplySport, e.Reply.Sport) && portOK(f.ReplyDport, e.Reply.Dport) &&
		(!f.MarkSet || f.Mark == e.Mark)
}

// Delete removes the connections f selects and returns how many, as
// `conntrack -D` does (kube-proxy deletes stale UDP entries by protocol and
// original destination or reply source this way).
func (t *Table) Delete(f Filter) int {
	t.gc(t.now())
	n := 0
	for e := t.first; e != nil; {
		next := e.next
		if f.Matches(e) {
			t.remove(e)
			n++
		}
		e = next
	}
	return n
}

// Flush removes every connection (`conntrack -F`): what Delete(Filter{})
// does, without taking the index apart slot by slot.
func (t *Table) Flush() {
	for e := t.first; e != nil; {
		next := e.next
		e.Status |= StatusDying
		e.handle, e.prev, e.next, e.hnext = 0, nil, nil, [2]hnode{}
		e = next
	}
	t.first, t.last = nil, nil
	t.idx.reset()
	clear(t.heads)
	t.count = 0
}

// slabMax is the most entries newEntry carves out of one allocation.
const slabMax = 128 // 18 KiB: the allocator's small-object path

// newEntry creates an unconfirmed entry for tuple tu. Entries are carved
// from slabs, doubling from 4 up to slabMax, so that a busy table does
// not allocate per connection; an entry is never reused (a packet or a
// caller may still hold a removed one, as the kernel's refcount allows).
func (t *Table) newEntry(tu Tuple, now time.Duration) *Entry {
	if len(t.slab) == 0 {
		t.slabN = min(max(2*t.slabN, 4), slabMax)
		t.slab = make([]Entry, t.slabN)
	}
	e := &t.slab[0]
	t.slab = t.slab[1:]
	t.nextID++
	e.ID, e.Orig, e.Reply, e.t = t.nextID, tu, tu.Invert(), t
	e.rel.e = e
	return e
}

// append adds a newly confirmed e to the ID-ordered list: at the end,
// unless connections created after it were confirmed first.
func (t *Table) append(e *Entry) {
	at := t.last
	for at != nil && at.ID > e.ID {
		at = at.prev
	}
	e.prev = at
	if at == nil {
		e.next = t.first
		t.first = e
	} else {
		e.next = at.next
		at.next = e
	}
	if e.next == nil {
		t.last = e
	} else {
		e.next.prev = e
	}
}

// full reports whether a new connection must be refused, after reaping
// expired entries.
func (t *Table) full(now time.Duration) bool {
	if t.count < t.max {
		return false
	}
	t.gc(now)
	return t.count >= t.max
}

// confirm inserts e (__nf_conntrack_confirm). It returns the entry the
// packet ends up attached to (e, or an identical entry that won a clash),
// or nil when the insert failed.
func (t *Table) confirm(e *Entry, now time.Duration) *Entry {
	if e.Status&StatusConfirmed != 0 {
		return e
	}
	if e.Status&StatusDying != 0 {
		return nil
	}
	free := e.free // which tuples are known absent (knownFree)
	if free&freeCount != t.inserts+1 {
		free = 0
	}
	if free&freeOrig == 0 {
		if o, _, ok := t.Lookup(e.Orig); ok {
			// nf_ct_resolve_clash: an identical connection won the race.
			if o.Orig == e.Orig && o.Reply == e.Reply {
				return o
			}
			t.Stats.InsertFailed++
			return nil
		}
	}
	if free&freeReply == 0 {
		if _, _, ok := t.Lookup(e.Reply); ok {
			t.Stats.InsertFailed++
			return nil
		}
	}
	e.Status |= StatusConfirmed
	t.inserts++
	t.idx.handle(e)
	if e.Orig != e.Reply {
		t.idx.insert(e, 0, &e.Orig)
	}
	t.idx.insert(e, 1, &e.Reply) // a tuple that is its own reply is the reply
	t.append(e)
	if t.heads != nil {
		t.link(e)
	}
	t.count++
	t.Stats.Insert++
	return e
}
