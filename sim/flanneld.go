package sim

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kubewalk/kubewalk/sim/flannel"
)

// flanneld is every node's flanneld with --kube-subnet-mgr as a watcher of
// Node objects: a node's lease is its spec.podCIDR plus the annotations
// its own flanneld wrote (VTEP MAC, public IP); each other flanneld
// programs a route, a PERMANENT neighbour and an FDB entry for it when the
// Node appears or its lease changes, and removes them when the Node is
// deleted. It reacts on the watch event itself (flanneld's reaction time
// is milliseconds).
type flanneld struct {
	leases map[string]flannel.Lease // node name → last lease seen
	// cur holds the lease of every Node object that has one now, and
	// names their names in order: what a starting flanneld's informer
	// lists, without listing (and deep-copying) every Node per node.
	cur   map[string]flannel.Lease
	names []string
	err   error
	// differ counts the names whose lease in cur is not the one in
	// leases (one has it, the other not, or they differ): while it is 0,
	// what a starting flanneld lists is what the others hold.
	differ int
}

// differs reports whether name's current lease is not its programmed one.
func (f *flanneld) differs(name string) bool {
	a, okA := f.cur[name]
	b, okB := f.leases[name]
	return okA != okB || a != b
}

// track runs change, keeping differ right for name.
func (f *flanneld) track(name string, change func()) {
	before := f.differs(name)
	change()
	if after := f.differs(name); after != before {
		if after {
			f.differ++
		} else {
			f.differ--
		}
	}
}

// setCurrent records the lease the Node named name has now (ok false:
// none, or the Node is gone).
func (f *flanneld) setCurrent(name string, l flannel.Lease, ok bool) {
	i, found := slices.BinarySearch(f.names, name)
	switch {
	case ok && !found:
		f.names = slices.Insert(f.names, i, name)
	case !ok && found:
		f.names = slices.Delete(f.names, i, i+1)
	}
	if ok {
		f.cur[name] = l
	} else {
		delete(f.cur, name)
	}
}

func (c *Cluster) watchFlannel() {
	c.flannel = &flanneld{leases: map[string]flannel.Lease{}, cur: map[string]flannel.Lease{}}
	c.API.WatchReadOnly("Node", func(ev watch.Event) {
		no := ev.Object.(*corev1.Node)
		f := c.flannel
		old, had := f.leases[no.Name]
		if ev.Type == watch.Deleted {
			f.track(no.Name, func() {
				f.setCurrent(no.Name, flannel.Lease{}, false)
				if had {
					delete(f.leases, no.Name)
				}
			})
			if had {
				c.Flannel.RemoveLease(old)
			}
			return
		}
		l, ok := flannel.LeaseFromNode(no.Name, no.Spec.PodCIDR, no.Annotations)
		f.track(no.Name, func() { f.setCurrent(no.Name, l, ok) })
		if !ok || (had && l == old) {
			return
		}
		f.track(no.Name, func() { f.leases[no.Name] = l })
		if had {
			c.Flannel.RemoveLease(old)
		}
		if err := c.Flannel.AddLease(l); err != nil && f.err == nil {
			f.err = err
		}
	})
}

// startFlanneld is a node's flanneld starting: its informer lists the
// Nodes there are (in name order) and programs every other lease.
func (c *Cluster) startFlanneld(n *Node) error {
	if n.Flannel == nil {
		return nil
	}
	f := c.flannel
	list := func() []flannel.Lease {
		leases := make([]flannel.Lease, 0, len(f.names))
		for _, name := range f.names {
			leases = append(leases, f.cur[name])
		}
		return leases
	}
	if err := c.Flannel.Join(n.Flannel, list, f.differ == 0); err != nil {
		return err
	}
	err := c.flannel.err
	c.flannel.err = nil
	return err
}
