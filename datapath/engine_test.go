package datapath

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// orderTimer records when it fired; firing, it schedules more timers, with
// no delay (the fifo) or a short one (the heap).
type orderTimer struct {
	id    int
	log   *[][2]int64
	spawn func(w *Walk)
}

func (t *orderTimer) Fire(w *Walk) {
	*t.log = append(*t.log, [2]int64{int64(w.Now()), int64(t.id)})
	t.spawn(w)
}

func TestEngineRunsEventsInTimeThenSequenceOrder(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		e := NewEngine(seed)
		r := rand.New(rand.NewPCG(seed, 1))
		var log [][2]int64
		ids, budget := 0, 2000
		var schedule func(delay time.Duration)
		schedule = func(delay time.Duration) {
			ids++
			e.ScheduleTimer(delay, &orderTimer{id: ids, log: &log, spawn: func(w *Walk) {
				for k := r.IntN(3); k > 0 && budget > 0; k-- {
					budget--
					schedule([]time.Duration{0, 0, 1, 2, 5}[r.IntN(5)])
				}
			}})
		}
		for i := 0; i < 5; i++ {
			schedule(time.Duration(r.IntN(3)))
		}
		for e.Pending() > 0 {
			at, ok := e.NextAt()
			require.True(t, ok)
			require.True(t, e.Step())
			require.Equal(t, int64(at), log[len(log)-1][0], "NextAt named the time of the event Step ran")
		}
		require.Len(t, log, ids, "seed %d: every event ran", seed)
		for i := 1; i < len(log); i++ {
			a, b := log[i-1], log[i]
			// ids are handed out in scheduling (sequence) order.
			require.True(t, a[0] < b[0] || (a[0] == b[0] && a[1] < b[1]),
				"seed %d: event %v ran before %v", seed, a, b)
		}
	}
}

type countingStage struct{ n int }

func (c *countingStage) Process(*Walk, *Packet) Verdict { c.n++; return VerdictContinue }

func TestSetHookPassiveCountsWithoutCalling(t *testing.T) {
	e := NewEngine(1)
	ns := e.NewNetns("n", "ns")
	a, b := &countingStage{}, &countingStage{}
	ns.AddHookStage(Output, "a", 0, a)
	ns.AddHookStage(Output, "b", 0, b)
	var pkts, bytes uint64
	require.True(t, ns.SetHookPassive(Output, "a", &pkts, &bytes))
	assert.False(t, ns.SetHookPassive(Output, "missing", &pkts, &bytes))
	assert.False(t, ns.SetHookPassive(Output, "a", &pkts, nil), "packets without bytes")
	ip := []byte{0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1,
		0x9c, 0x40, 0x23, 0x28, 0, 8, 0, 0}
	send := func() {
		p := e.Pool.Get()
		p.SetIPPacket(ip)
		require.True(t, ns.runHook(e.Walk(), Output, p, nil))
		p.Release()
	}
	send()
	send()
	assert.Equal(t, [2]int{0, 2}, [2]int{a.n, b.n}, "a is counted, b is called")
	assert.Equal(t, [2]uint64{2, 56}, [2]uint64{pkts, bytes})
	st := ns.HookStages(Output)
	require.Len(t, st, 2)
	assert.Equal(t, []string{"a", "b"}, []string{st[0].Name, st[1].Name}, "the order is kept")
	assert.True(t, st[0].Passive())
	require.True(t, ns.SetHookPassive(Output, "a", nil, nil))
	send()
	assert.Equal(t, [2]int{1, 3}, [2]int{a.n, b.n})
	assert.Equal(t, uint64(2), pkts)
}

// cancelledTimer was stopped after it was scheduled: it must never fire.
type cancelledTimer struct{ t *testing.T }

func (c cancelledTimer) Fire(*Walk) { c.t.Error("a cancelled timer fired") }
func (cancelledTimer) Stale() bool  { return true }

// TestEngineRunsPacketsAndTimersInTimeThenSequenceOrder mixes frames handed
// to a device (the engine's own short path for events due now) with
// timers (some cancelled), all spawning more with no delay or a short one, and
// checks under Run and RunUntil that everything ran in (time, sequence)
// order, as the heap alone would have run it.
func TestEngineRunsPacketsAndTimersInTimeThenSequenceOrder(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		e := NewEngine(seed)
		ns := e.NewNetns("n", "ns")
		d, err := ns.AddNIC("eth0", MAC{2, 0, 0, 0, 0, 1}, 1500)
		require.NoError(t, err)
		d.SetUp(true)
		r := rand.New(rand.NewPCG(seed, 2))
		var log [][2]int64
		ids, budget := 0, 2000
		var schedule func(delay time.Duration)
		spawn := func(w *Walk) {
			for k := r.IntN(3); k > 0 && budget > 0; k-- {
				budget--
				schedule([]time.Duration{0, 0, 0, 1, 2, 5}[r.IntN(6)])
			}
		}
		d.AddRxStage("log", 0, StageFunc(func(w *Walk, p *Packet) Verdict {
			f := p.Frame()
			log = append(log, [2]int64{int64(w.Now()), int64(f[14])<<8 | int64(f[15])})
			p.Release()
			spawn(w)
			return VerdictStolen
		}))
		schedule = func(delay time.Duration) {
			if r.IntN(5) == 0 {
				e.ScheduleTimer(delay, cancelledTimer{t})
				return
			}
			ids++
			if r.IntN(2) == 0 {
				e.ScheduleTimer(delay, &orderTimer{id: ids, log: &log, spawn: spawn})
				return
			}
			p := e.Pool.Get()
			frame := make([]byte, 60)
			frame[14], frame[15] = byte(ids>>8), byte(ids)
			p.SetFrame(frame)
			e.ScheduleRx(delay, d, p)
		}
		for i := 0; i < 5; i++ {
			schedule(time.Duration(r.IntN(3)))
		}
		for until := time.Duration(0); e.Pending() > 0; until += 3 {
			require.NoError(t, e.RunUntil(until))
		}
		require.Len(t, log, ids, "seed %d: every event ran", seed)
		for i := 1; i < len(log); i++ {
			a, b := log[i-1], log[i]
			require.True(t, a[0] < b[0] || (a[0] == b[0] && a[1] < b[1]),
				"seed %d: event %v ran before %v", seed, a, b)
		}
	}
}
