package conntrack

import "time"

// hnode is a node of a hash chain: one direction of a connection (the
// kernel's nf_conntrack_tuple_hash). A zero hnode ends a chain.
type hnode struct {
	e   *Entry
	dir uint8 // 0 original, 1 reply
}

func (n hnode) tuple() Tuple {
	if n.dir == 0 {
		return n.e.Orig
	}
	return n.e.Reply
}

// hashTuple is a fixed FNV-1a hash of a tuple: deterministic, where the
// kernel's hash_conntrack_raw is siphash with a per-boot key.
func hashTuple(tu Tuple) uint32 {
	h := uint32(2166136261)
	mix := func(b byte) { h ^= uint32(b); h *= 16777619 }
	for _, b := range tu.Src {
		mix(b)
	}
	for _, b := range tu.Dst {
		mix(b)
	}
	mix(byte(tu.Sport >> 8))
	mix(byte(tu.Sport))
	mix(byte(tu.Dport >> 8))
	mix(byte(tu.Dport))
	mix(tu.Proto)
	return h
}

// bucket is reciprocal_scale(hash, nf_conntrack_buckets).
func (t *Table) bucket(tu Tuple) uint32 {
	return uint32(uint64(hashTuple(tu)) * uint64(t.nbuckets) >> 32)
}

// buildIndex lays every live connection into the hash chains, in ID
// order so that the chains are the same on every run.
func (t *Table) buildIndex() {
	t.heads = make([]hnode, t.nbuckets)
	for _, e := range t.List() {
		t.link(e)
	}
}

// link adds both directions of e at the head of their chains
// (hlist_nulls_add_head_rcu).
func (t *Table) link(e *Entry) {
	for dir := uint8(0); dir < 2; dir++ {
		n := hnode{e: e, dir: dir}
		b := t.bucket(n.tuple())
		e.hnext[dir] = t.heads[b]
		t.heads[b] = n
	}
}

// unlink removes direction dir of e from its chain.
func (t *Table) unlink(e *Entry, dir uint8) {
	me := hnode{e: e, dir: dir}
	b := t.bucket(me.tuple())
	if t.heads[b] == me {
		t.heads[b] = e.hnext[dir]
		e.hnext[dir] = hnode{}
		return
	}
	for n := t.heads[b]; n.e != nil; n = n.e.hnext[n.dir] {
		if n.e.hnext[n.dir] == me {
			n.e.hnext[n.dir] = e.hnext[dir]
			e.hnext[dir] = hnode{}
			return
		}
	}
}

// earlyDrop is early_drop(net, hash): for up to EvictionRange buckets
// from the new tuple's, walk the chain (early_drop_list): expired entries
// are reaped (nf_ct_gc_expired, not counted), and every confirmed entry
// that is not ASSURED and not dying is deleted. The first bucket that
// evicts anything ends the scan; it reports whether one did.
func (t *Table) earlyDrop(tu Tuple, now time.Duration) int {
	if t.heads == nil {
		t.buildIndex()
	}
	b := t.bucket(tu)
	var victims []*Entry
	for i := 0; i < EvictionRange; i++ {
		victims = victims[:0]
		var expired []*Entry
		for n := t.heads[b]; n.e != nil; n = n.e.hnext[n.dir] {
			e := n.e
			switch {
			case e.expires <= now:
				expired = append(expired, e)
			case e.Status&(StatusAssured|StatusDying) == 0 && e.Status&StatusConfirmed != 0:
				victims = append(victims, e)
			}
		}
		for _, e := range expired {
			t.remove(e)
		}
		drops := 0
		for _, e := range victims {
			if e.Status&StatusDying == 0 { // both directions may be in one chain
				t.remove(e)
				drops++
			}
		}
		if drops > 0 {
			t.Stats.EarlyDrop += uint64(drops)
			return drops
		}
		b = (b + 1) % t.nbuckets
	}
	return 0
}
