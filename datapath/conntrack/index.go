package conntrack

import "encoding/binary"

// tupleIndex finds the connection a tuple belongs to: both directions of
// every confirmed connection, in an open-addressing hash table with linear
// probing. A slot is one word, hash<<32 | handle<<1 | dir (0 is empty),
// where the handle numbers the connection in ents: the slots hold no
// pointers, so a first packet's inserts and a flush's removals touch one
// dense array the garbage collector never scans, and a removal shifts the
// following slots back instead of leaving a tombstone. The table doubles
// at half load and never shrinks (as a Go map would not).
//
// The layout decides nothing observable: listings walk the table's
// ID-ordered list, and early_drop its own hash chains.
type tupleIndex struct {
	slots []uint64
	used  int      // occupied slots
	ents  []*Entry // by handle; ents[0] is never used
	free  []int32  // handles of removed connections, for reuse
}

// minIndexSlots is the size of a table's first slot array.
const minIndexSlots = 16

// indexHash is the index's hash of a tuple (not hashTuple, which decides
// early_drop's buckets). It is symmetric in the two endpoints but for
// its lowest bit: a connection without NAT has Reply = Orig inverted, and
// both then hash to neighbouring slots of one cache line, so that a new
// connection's lookups and inserts touch one line instead of two. The
// lowest bit says which endpoint sorted first. For ICMP the endpoints
// are the addresses and the identifier (the type changes on inversion).
func indexHash(tu *Tuple) uint32 {
	a := uint64(binary.BigEndian.Uint32(tu.Src[:]))<<16 | uint64(tu.Sport)
	bp := tu.Dport
	if tu.Proto == 1 { // datapath.ProtoICMP
		bp = tu.Sport
	}
	b := uint64(binary.BigEndian.Uint32(tu.Dst[:]))<<16 | uint64(bp)
	var swapped uint32
	if a > b {
		a, b, swapped = b, a, 1
	}
	h := (a^uint64(tu.Proto)<<48)*0xbf58476d1ce4e5b9 ^ b*0x94d049bb133111eb
	h ^= h >> 31
	h *= 0xd6e8feb86659fd93
	return uint32(h>>32)&^1 | swapped
}

// lookup returns the connection tu belongs to (live or not) and whether tu
// is its reply direction.
func (x *tupleIndex) lookup(tu *Tuple) (*Entry, bool, bool) {
	if len(x.slots) == 0 {
		return nil, false, false
	}
	h := indexHash(tu)
	mask := uint32(len(x.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := x.slots[i]
		if s == 0 {
			return nil, false, false
		}
		if uint32(s>>32) != h {
			continue
		}
		e := x.ents[uint32(s)>>1]
		if s&1 == 0 {
			if e.Orig == *tu {
				return e, false, true
			}
		} else if e.Reply == *tu {
			return e, true, true
		}
	}
}

// handle gives e a handle, so that its slots can name it.
func (x *tupleIndex) handle(e *Entry) {
	if n := len(x.free); n > 0 {
		e.handle = x.free[n-1]
		x.free = x.free[:n-1]
	} else {
		if len(x.ents) == 0 {
			x.ents = append(x.ents, nil)
		}
		e.handle = int32(len(x.ents))
		x.ents = append(x.ents, nil)
	}
	x.ents[e.handle] = e
}

// release frees e's handle once its slots are gone.
func (x *tupleIndex) release(e *Entry) {
	x.ents[e.handle] = nil
	x.free = append(x.free, e.handle)
	e.handle = 0
}

// insert adds direction dir of e (which has a handle) under tuple tu.
func (x *tupleIndex) insert(e *Entry, dir uint8, tu *Tuple) {
	if 2*(x.used+1) > len(x.slots) {
		x.grow()
	}
	h := indexHash(tu)
	e.hash[dir] = h
	x.place(uint64(h)<<32 | uint64(e.handle)<<1 | uint64(dir))
	x.used++
}

func (x *tupleIndex) place(s uint64) {
	mask := uint32(len(x.slots) - 1)
	i := uint32(s>>32) & mask
	for x.slots[i] != 0 {
		i = (i + 1) & mask
	}
	x.slots[i] = s
}

func (x *tupleIndex) grow() {
	old := x.slots
	n := 2 * len(old)
	if n < minIndexSlots {
		n = minIndexSlots
	}
	x.slots = make([]uint64, n)
	for _, s := range old {
		if s != 0 {
			x.place(s)
		}
	}
}

// remove deletes direction dir of e, if inserted, and shifts the slots
// after it back so that every probe sequence stays unbroken.
func (x *tupleIndex) remove(e *Entry, dir uint8) {
	if len(x.slots) == 0 {
		return
	}
	h := e.hash[dir]
	want := uint64(h)<<32 | uint64(e.handle)<<1 | uint64(dir)
	mask := uint32(len(x.slots) - 1)
	i := h & mask
	for x.slots[i] != want {
		if x.slots[i] == 0 {
			return
		}
		i = (i + 1) & mask
	}
	x.used--
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		s := x.slots[j]
		if s == 0 {
			break
		}
		// The slot at j may move to the hole at i unless its home lies
		// cyclically in (i, j].
		if home := uint32(s>>32) & mask; (j-home)&mask >= (j-i)&mask {
			x.slots[i] = s
			i = j
		}
	}
	x.slots[i] = 0
}

// reset empties the index, keeping its arrays.
func (x *tupleIndex) reset() {
	clear(x.slots)
	clear(x.ents)
	x.ents = x.ents[:0]
	x.free = x.free[:0]
	x.used = 0
}
