package sources

import (
	"slices"
	"testing"
	"time"
)

func TestDelayQueuePopsByDueTimeThenPushOrderAndOnlyWhenDue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name string
		give []int // due times in ms, pushed in this order; the value is the index
		now  int
		want []int // values popped at now, in order
		next int   // the due time left first; -1: none
	}{
		{"empty", nil, 100, nil, -1},
		{"none due yet", []int{50, 20}, 10, nil, 20},
		{"earliest first", []int{30, 10, 20}, 100, []int{1, 2, 0}, -1},
		{"equal due times in push order", []int{10, 10, 5, 10}, 10, []int{2, 0, 1, 3}, -1},
		{"due exactly now", []int{10, 11}, 10, []int{0}, 11},
		{"only the due ones", []int{40, 5, 30, 15}, 20, []int{1, 3}, 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var q delayQueue[int]
			for i, ms := range tt.give {
				q.Push(at(ms), i)
			}
			var got []int
			for {
				v, ok := q.PopDue(at(tt.now))
				if !ok {
					break
				}
				got = append(got, v)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("PopDue at %dms = %v; want %v", tt.now, got, tt.want)
			}
			next, ok := q.Next()
			switch {
			case tt.next < 0 && ok:
				t.Errorf("Next() = %v, true; want none", next.Sub(t0))
			case tt.next >= 0 && (!ok || !next.Equal(at(tt.next))):
				t.Errorf("Next() = %v, %v; want %dms, true", next.Sub(t0), ok, tt.next)
			}
			if q.Len() != len(tt.give)-len(tt.want) {
				t.Errorf("Len() = %d; want %d", q.Len(), len(tt.give)-len(tt.want))
			}
		})
	}
}

func TestDelayQueueKeepDropsOnlyWhatItIsToldAndKeepsTheOrder(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var q delayQueue[int]
	for i, ms := range []int{70, 10, 60, 20, 50, 30, 40, 10} {
		q.Push(t0.Add(time.Duration(ms)*time.Millisecond), i)
	}
	q.Keep(func(v int) bool { return v%2 == 1 }) // drop 0, 2, 4, 6: 70, 60, 50, 40ms
	var got []int
	for {
		v, ok := q.PopDue(t0.Add(time.Hour))
		if !ok {
			break
		}
		got = append(got, v)
	}
	if want := []int{1, 7, 3, 5}; !slices.Equal(got, want) {
		t.Errorf("after Keep(odd) popped %v; want %v", got, want)
	}
	q.Push(t0, 9)
	if n := q.Clear(); n != 1 || q.Len() != 0 {
		t.Errorf("Clear() = %d, Len() = %d after; want 1, 0", n, q.Len())
	}
}
