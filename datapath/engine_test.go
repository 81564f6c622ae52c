package datapath

import (
	"math/rand/v2"
	"testing"
	"time"

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
