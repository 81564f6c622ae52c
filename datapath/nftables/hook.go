package nftables

import (
	"github.com/kubewalk/kubewalk/datapath"
	"github.com/kubewalk/kubewalk/datapath/conntrack"
	"github.com/kubewalk/kubewalk/datapath/trace"
)

const maxJumps = 16 // NFT_JUMP_STACK_SIZE

// runChain is nft_do_chain: rules in order; jump pushes, goto replaces,
// return pops; the base chain's policy applies when it falls off the end.
func (n *NFTables) runChain(c *ctx, base *Chain) vcode {
	type frame struct {
		ch *Chain
		i  int
	}
	var stack [maxJumps]frame
	sp := 0
	ch, i := base, 0
	for {
		if i >= len(ch.rules) {
			if sp == 0 {
				if ch.PolicyDrop {
					c.rule = nil
					return vDrop
				}
				return vAccept
			}
			sp--
			ch, i = stack[sp].ch, stack[sp].i
			continue
		}
		r := ch.rules[i]
		i++
		n.Rules++
		c.verdict = verdictVal{}
		c.chosen = ""
		matched := true
		for _, e := range r.exprs {
			if !e.eval(c) {
				matched = false
				break
			}
			if c.verdict.code != vNone {
				break
			}
		}
		if !matched {
			continue
		}
		if c.p.Trace != nil {
			d := r.text(false)
			if c.chosen != "" {
				d += " => " + c.chosen
			}
			n.observe(c, ch, trace.Matched, d)
		}
		switch c.verdict.code {
		case vNone, vContinue:
		case vAccept:
			return vAccept
		case vDrop, vReject:
			c.rule = r
			return c.verdict.code
		case vReturn:
			if sp == 0 {
				i = len(ch.rules)
				continue
			}
			sp--
			ch, i = stack[sp].ch, stack[sp].i
		case vJump:
			if sp >= maxJumps {
				c.rule = r
				return vDrop
			}
			stack[sp] = frame{ch, i}
			sp++
			ch, i = c.verdict.chain, 0
		case vGoto:
			ch, i = c.verdict.chain, 0
		}
	}
}

func (n *NFTables) observe(c *ctx, ch *Chain, a trace.Action, detail string) {
	o := trace.Observation{Node: n.ns.Node, Netns: n.ns.Name, Stage: "nft/" + ch.Name, Action: a,
		Summary: c.p.Summary(), Detail: detail}
	if d := inOut(c); d != nil {
		o.Device = d.Name
	}
	c.w.Observe(c.p, o)
}

func inOut(c *ctx) *datapath.Device {
	switch c.hook {
	case datapath.Prerouting, datapath.Input, datapath.Forward:
		return c.p.InDev
	}
	return c.p.OutDev
}

// finish turns a drop or reject into a stage verdict: reject answers with
// ICMP port unreachable first; traced drops are recorded with the rule.
func (n *NFTables) finish(c *ctx, v vcode) datapath.Verdict {
	if v != vDrop && v != vReject {
		return datapath.VerdictContinue
	}
	w, p, r := c.w, c.p, c.rule
	reason := datapath.ReasonNetfilterDrop
	if v == vReject {
		reason = datapath.ReasonNetfilterReject
		n.ns.SendICMPError(w, p, 3, 3)
	}
	if p.Trace == nil {
		return datapath.DropVerdict(reason)
	}
	stage, detail := "nft", "policy drop"
	if r != nil {
		stage, detail = "nft/"+r.chain.Name, r.text(false)
	}
	o := trace.Observation{Node: n.ns.Node, Netns: n.ns.Name, Stage: stage, Action: trace.Dropped,
		Summary: p.Summary(), Detail: detail, Reason: reason.String()}
	if d := inOut(c); d != nil {
		o.Device = d.Name
	}
	w.Observe(p, o)
	p.Release()
	return datapath.VerdictStolen
}

// filterChain is a filter-type base chain on its hook.
type filterChain struct {
	n *NFTables
	c *Chain
}

// Process runs the chain; accept lets the packet on to the next stage.
func (s *filterChain) Process(w *datapath.Walk, p *datapath.Packet) datapath.Verdict {
	c := &s.n.ctx
	if !c.init(s.n, w, p, s.c.Hook) {
		return datapath.VerdictContinue
	}
	return s.n.finish(c, s.n.runChain(c, s.c))
}

// natChain is a nat-type base chain in the NAT core.
type natChain struct {
	n *NFTables
	c *Chain
}

// NATLookup implements netfilter.NATLookup.
func (s *natChain) NATLookup(w *datapath.Walk, p *datapath.Packet, m conntrack.Manip) datapath.Verdict {
	c := &s.n.ctx
	if !c.init(s.n, w, p, s.c.Hook) {
		return datapath.VerdictContinue
	}
	c.nat, c.manip = true, m
	return s.n.finish(c, s.n.runChain(c, s.c))
}
