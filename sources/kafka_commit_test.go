package sources

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// trackerOp is one step of a tracker test: fetch an offset of a partition, or
// finish it.
type trackerOp struct {
	fetch, finish bool
	partition     int
	offset        int64
}

func fetchOp(p int, o int64) trackerOp  { return trackerOp{fetch: true, partition: p, offset: o} }
func finishOp(p int, o int64) trackerOp { return trackerOp{finish: true, partition: p, offset: o} }

func fetchRange(p int, from, to int64) []trackerOp {
	var ops []trackerOp
	for o := from; o <= to; o++ {
		ops = append(ops, fetchOp(p, o))
	}
	return ops
}

func TestCommitTrackerMarkIsLowestUnfinishedOffsetOrOnePastLastFetched(t *testing.T) {
	tests := []struct {
		name string
		give []trackerOp
		want map[int]int64 // partition -> mark
	}{
		{
			name: "nothing finished holds the mark at the first offset",
			give: fetchRange(0, 5, 9),
			want: map[int]int64{0: 5},
		},
		{
			name: "in order",
			give: append(fetchRange(0, 0, 2), finishOp(0, 0), finishOp(0, 1), finishOp(0, 2)),
			want: map[int]int64{0: 3},
		},
		{
			name: "out of order, all finished",
			give: append(fetchRange(0, 0, 3), finishOp(0, 2), finishOp(0, 3), finishOp(0, 0), finishOp(0, 1)),
			want: map[int]int64{0: 4},
		},
		{
			name: "a late message holds the mark while later ones finish",
			give: append(fetchRange(0, 0, 4), finishOp(0, 0), finishOp(0, 2), finishOp(0, 3), finishOp(0, 4)),
			want: map[int]int64{0: 1},
		},
		{
			name: "a hole in the middle",
			give: append(fetchRange(0, 0, 4), finishOp(0, 0), finishOp(0, 1), finishOp(0, 3), finishOp(0, 4)),
			want: map[int]int64{0: 2},
		},
		{
			name: "gaps in the log (compaction) are skipped",
			give: []trackerOp{fetchOp(0, 10), fetchOp(0, 15), fetchOp(0, 40), finishOp(0, 10), finishOp(0, 40)},
			want: map[int]int64{0: 15},
		},
		{
			name: "gaps in the log, all finished",
			give: []trackerOp{fetchOp(0, 10), fetchOp(0, 15), fetchOp(0, 40), finishOp(0, 15), finishOp(0, 40), finishOp(0, 10)},
			want: map[int]int64{0: 41},
		},
		{
			name: "partitions are independent",
			give: []trackerOp{
				fetchOp(0, 0), fetchOp(1, 7), fetchOp(0, 1), fetchOp(1, 8), fetchOp(2, 3),
				finishOp(0, 1), finishOp(1, 7), finishOp(1, 8), finishOp(0, 0),
			},
			want: map[int]int64{0: 2, 1: 9, 2: 3},
		},
		{
			name: "a refetched offset (after a rebalance) is not tracked again",
			give: []trackerOp{
				fetchOp(0, 0), fetchOp(0, 1), fetchOp(0, 2), finishOp(0, 0),
				fetchOp(0, 1), fetchOp(0, 2), fetchOp(0, 3), // the reader restarts at the committed offset 1
				finishOp(0, 1), finishOp(0, 2), finishOp(0, 3),
			},
			want: map[int]int64{0: 4},
		},
		{
			name: "finishing twice changes nothing",
			give: append(fetchRange(0, 0, 2), finishOp(0, 1), finishOp(0, 1)),
			want: map[int]int64{0: 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newCommitTracker()
			nodes := make(map[[2]int64]*pendingOffset)
			for _, op := range tt.give {
				key := [2]int64{int64(op.partition), op.offset}
				switch {
				case op.fetch:
					n := &pendingOffset{partition: op.partition, offset: op.offset}
					if tr.add(n) {
						nodes[key] = n
					}
				case op.finish:
					tr.finish(nodes[key])
				}
			}
			for p, want := range tt.want {
				if got, ok := tr.markOf(p); !ok || got != want {
					t.Errorf("markOf(%d) = %d, %v; want %d, true", p, got, ok, want)
				}
			}
		})
	}
}

func TestCommitTrackerAddRejectsOffsetsNotPastTheLast(t *testing.T) {
	tr := newCommitTracker()
	tests := []struct {
		give int64
		want bool
	}{
		{give: 5, want: true},
		{give: 6, want: true},
		{give: 6, want: false},
		{give: 3, want: false},
		{give: 9, want: true},
		{give: 7, want: false},
	}
	for _, tt := range tests {
		if got := tr.add(&pendingOffset{partition: 1, offset: tt.give}); got != tt.want {
			t.Errorf("add(offset %d) = %v; want %v", tt.give, got, tt.want)
		}
	}
	if got := tr.unfinished(1); got != 3 {
		t.Errorf("unfinished(1) = %d; want 3", got)
	}
}

func TestCommitTrackerFinishReportsEveryChangeOfTheCommit(t *testing.T) {
	tr := newCommitTracker()
	n := make([]*pendingOffset, 4)
	for i := range n {
		n[i] = &pendingOffset{partition: 0, offset: int64(i)}
		tr.add(n[i])
	}
	tests := []struct {
		give     int
		want     bool
		wantMark int64
	}{
		{give: 2, want: true, wantMark: 0}, // finished above the mark: the metadata changes
		{give: 1, want: true, wantMark: 0},
		{give: 0, want: true, wantMark: 3},
		{give: 0, want: false, wantMark: 3}, // twice
		{give: 3, want: true, wantMark: 4},
	}
	for _, tt := range tests {
		if got := tr.finish(n[tt.give]); got != tt.want {
			t.Errorf("finish(offset %d) = %v; want %v", tt.give, got, tt.want)
		}
		if got, _ := tr.markOf(0); got != tt.wantMark {
			t.Errorf("after finish(offset %d): markOf(0) = %d; want %d", tt.give, got, tt.wantMark)
		}
	}
	if got := tr.unfinished(0); got != 0 {
		t.Errorf("unfinished(0) = %d; want 0", got)
	}
}

// A nacked message is simply not finished: it holds the mark, across any
// number of redeliveries, until it is acked.
func TestCommitTrackerNackedOffsetHoldsTheMarkUntilFinished(t *testing.T) {
	tr := newCommitTracker()
	var n []*pendingOffset
	for o := range int64(100) {
		p := &pendingOffset{partition: 3, offset: o}
		tr.add(p)
		n = append(n, p)
	}
	const nacked = 40
	for i, p := range n {
		if i != nacked {
			tr.finish(p)
		}
	}
	if got, _ := tr.markOf(3); got != nacked {
		t.Fatalf("markOf(3) with offset %d nacked = %d; want %d", nacked, got, nacked)
	}
	// The commit records the 59 offsets finished above the nacked one.
	if got := tr.advanced(nil); !slices.Equal(got, []partitionMark{{Partition: 3, Offset: nacked, Metadata: "s1:40:1+59"}}) {
		t.Fatalf("advanced() = %v; want [{3 %d s1:40:1+59}]", got, nacked)
	}
	if got := tr.unfinished(3); got != 1 {
		t.Errorf("unfinished(3) = %d; want 1 (memory holds only unfinished offsets)", got)
	}
	tr.finish(n[nacked])
	if got := tr.advanced(nil); !slices.Equal(got, []partitionMark{{Partition: 3, Offset: 100}}) {
		t.Fatalf("advanced() after acking the nacked message = %v; want [{3 100}]", got)
	}
}

func TestCommitTrackerAdvancedReturnsEachAdvanceOnceAndRetryReturnsItAgain(t *testing.T) {
	tr := newCommitTracker()
	a := &pendingOffset{partition: 0, offset: 0}
	b := &pendingOffset{partition: 1, offset: 10}
	c := &pendingOffset{partition: 1, offset: 11}
	for _, n := range []*pendingOffset{a, b, c} {
		tr.add(n)
	}
	if got := tr.advanced(nil); len(got) != 0 {
		t.Fatalf("advanced() before any finish = %v; want none", got)
	}
	tr.finish(c) // not the lowest of partition 1: its metadata changes
	tr.finish(a)
	got := tr.advanced(nil)
	slices.SortFunc(got, func(a, b partitionMark) int { return a.Partition - b.Partition })
	if want := []partitionMark{{Partition: 0, Offset: 1}, {Partition: 1, Offset: 10, Metadata: "s1:10:1+1"}}; !slices.Equal(got, want) {
		t.Fatalf("advanced() = %v; want %v", got, want)
	}
	if again := tr.advanced(nil); len(again) != 0 {
		t.Fatalf("advanced() again = %v; want none", again)
	}
	tr.retry(got)
	again := tr.advanced(nil)
	slices.SortFunc(again, func(a, b partitionMark) int { return a.Partition - b.Partition })
	if !slices.Equal(again, got) {
		t.Fatalf("advanced() after retry = %v; want %v", again, got)
	}
	tr.setCommitted(again)
	tr.retry(again)
	if again := tr.advanced(nil); len(again) != 0 {
		t.Fatalf("advanced() after the commit = %v; want none (nothing changed since)", again)
	}
	tr.finish(b)
	if got := tr.advanced(nil); !slices.Equal(got, []partitionMark{{Partition: 1, Offset: 12}}) {
		t.Fatalf("advanced() = %v; want [{1 12}]", got)
	}
}

func TestCommitTrackerFinalReturnsEveryPartitionThatMoved(t *testing.T) {
	tr := newCommitTracker()
	for p := range 3 {
		for o := range int64(3) {
			n := &pendingOffset{partition: p, offset: 100*int64(p) + o}
			tr.add(n)
			if p < 2 && (p == 1 || o == 0) {
				tr.finish(n) // partition 0: first only; partition 1: all; partition 2: none
			}
		}
	}
	tr.advanced(nil) // staged once already: final returns them again
	got := tr.final(nil)
	slices.SortFunc(got, func(a, b partitionMark) int { return a.Partition - b.Partition })
	want := []partitionMark{{Partition: 0, Offset: 1}, {Partition: 1, Offset: 103}}
	if !slices.Equal(got, want) {
		t.Fatalf("final() = %v; want %v (partition 2 never moved)", got, want)
	}
	tr.setCommitted(got)

	// A message finished behind one that still holds the mark: the mark
	// stays, but final commits the partition again, for its metadata.
	n := &pendingOffset{partition: 1, offset: 104}
	tr.add(&pendingOffset{partition: 1, offset: 103})
	tr.add(n)
	tr.finish(n)
	if got, want := tr.final(nil), []partitionMark{{Partition: 1, Offset: 103, Metadata: "s1:103:1+1"}}; !slices.Equal(got, want) {
		t.Fatalf("final() after a finish above the mark = %v; want %v", got, want)
	}
}

// The mark must never pass an unfinished offset, whatever the order of
// finishing: checked against a brute-force model over many orders.
func TestCommitTrackerNeverPassesAnUnfinishedOffset(t *testing.T) {
	const n = 8
	for seed := range 500 {
		perm := permutation(n, uint64(seed))
		tr := newCommitTracker()
		nodes := make([]*pendingOffset, n)
		for i := range nodes {
			nodes[i] = &pendingOffset{partition: 0, offset: int64(i) * 2} // gaps of one
			tr.add(nodes[i])
		}
		done := make([]bool, n)
		for step, i := range perm {
			tr.finish(nodes[i])
			done[i] = true
			want := int64(2*(n-1) + 1)
			for j := range n {
				if !done[j] {
					want = nodes[j].offset
					break
				}
			}
			if got, _ := tr.markOf(0); got != want {
				t.Fatalf("order %v, after %d finishes: markOf(0) = %d; want %d", perm, step+1, got, want)
			}
		}
	}
}

// permutation returns a deterministic pseudo-random permutation of [0, n).
func permutation(n int, seed uint64) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	x := seed*2654435761 + 1
	for i := n - 1; i > 0; i-- {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		j := int(x % uint64(i+1))
		p[i], p[j] = p[j], p[i]
	}
	return p
}

func BenchmarkCommitTrackerAddFinish(b *testing.B) {
	for _, window := range []int{2, 100} {
		b.Run(fmt.Sprintf("window=%d", window), func(b *testing.B) {
			tr := newCommitTracker()
			nodes := make([]pendingOffset, b.N+window)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N + window {
				nodes[i] = pendingOffset{partition: i % 4, offset: int64(i)}
				tr.add(&nodes[i])
				if i >= window {
					tr.finish(&nodes[(i-window)^1]) // pairs out of order
				}
			}
		})
	}
}

func TestCommitTrackerFinalSkipsWhatWasCommittedAndDropForgetsAPartition(t *testing.T) {
	tr := newCommitTracker()
	n := make([]*pendingOffset, 4)
	for i := range n {
		n[i] = &pendingOffset{partition: 0, offset: int64(10 + i)}
		tr.add(n[i])
	}
	tr.finish(n[0])
	tr.finish(n[1])
	first := tr.final(nil)
	if want := []partitionMark{{Partition: 0, Offset: 12}}; !slices.Equal(first, want) {
		t.Fatalf("final() = %v; want %v", first, want)
	}
	tr.setCommitted(first)
	if got := tr.final(nil); len(got) != 0 {
		t.Fatalf("final() after setCommitted = %v; want none (nothing moved since)", got)
	}
	if got, ok := tr.resume(0, 12); !ok || got.offset != 14 || got.restore {
		t.Fatalf("resume(0, 12) = %+v, %v; want offset 14, true (after the last offset added)", got, ok)
	}

	tr.drop(0) // revoked: a rebalance gave the partition to another member
	if advanced := tr.finish(n[2]); advanced {
		t.Errorf("finish of a dropped partition's offset reported an advance")
	}
	if got := tr.advanced(nil); len(got) != 0 {
		t.Errorf("advanced() after drop = %v; want none", got)
	}
	if got, _ := tr.resume(0, 12); got.offset != 12 || !got.restore {
		t.Errorf("resume(0, 12) after drop = %+v; want offset 12 with restore (nothing tracked)", got)
	}
	// Assigned here again: it starts afresh at the group's committed offset.
	if !tr.add(&pendingOffset{partition: 0, offset: 12}) {
		t.Fatalf("add(offset 12) after drop = false; want true")
	}
	if got, _ := tr.markOf(0); got != 12 {
		t.Errorf("markOf(0) = %d; want 12", got)
	}
}

func TestCommitTrackerMetadataRecordsTheOffsetsFinishedAboveTheMark(t *testing.T) {
	tests := []struct {
		name string
		give []trackerOp
		want partitionMark
	}{
		{
			name: "nothing finished above the mark",
			give: append(fetchRange(0, 0, 4), finishOp(0, 0), finishOp(0, 1)),
			want: partitionMark{Offset: 2},
		},
		{
			name: "all finished",
			give: append(fetchRange(0, 0, 2), finishOp(0, 2), finishOp(0, 0), finishOp(0, 1)),
			want: partitionMark{Offset: 3},
		},
		{
			name: "one pending, the rest finished",
			give: append(fetchRange(0, 0, 9), finishOp(0, 0), finishOp(0, 2), finishOp(0, 3), finishOp(0, 4),
				finishOp(0, 5), finishOp(0, 6), finishOp(0, 7), finishOp(0, 8), finishOp(0, 9)),
			want: partitionMark{Offset: 1, Metadata: "s1:1:1+8"},
		},
		{
			name: "holes, and unfinished offsets at the end",
			give: append(fetchRange(0, 0, 9), finishOp(0, 1), finishOp(0, 2), finishOp(0, 5), finishOp(0, 7)),
			want: partitionMark{Offset: 0, Metadata: "s1:0:1+2,2+1,1+1"},
		},
		{
			name: "gaps in the log count as finished",
			give: []trackerOp{fetchOp(0, 10), fetchOp(0, 15), fetchOp(0, 40), fetchOp(0, 41), finishOp(0, 15), finishOp(0, 41)},
			want: partitionMark{Offset: 10, Metadata: "s1:10:1+29,1+1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newCommitTracker()
			nodes := make(map[int64]*pendingOffset)
			for _, op := range tt.give {
				if op.fetch {
					nodes[op.offset] = &pendingOffset{partition: 0, offset: op.offset}
					tr.add(nodes[op.offset])
				} else {
					tr.finish(nodes[op.offset])
				}
			}
			got := tr.final(nil)
			if len(got) != 1 || got[0] != tt.want {
				t.Errorf("final() = %v; want [%v]", got, tt.want)
			}
		})
	}
}

// A partition taken over from the group starts with what its committed
// metadata has as finished: the reader skips those offsets, the mark moves
// past them without their being fetched, and the metadata keeps them until
// the mark passes them.
func TestCommitTrackerRestoredPartitionTakesTheCommittedFinishedOffsetsAsFinished(t *testing.T) {
	tr := newCommitTracker()
	ahead, err := tr.restore(0, 10, "s1:10:1+39,1+49")
	if want := []offsetRange{{11, 49}, {51, 99}}; err != nil || !slices.Equal(ahead, want) {
		t.Fatalf("restore(0, 10, s1:10:1+39,1+49) = %v, %v; want %v, nil", ahead, err, want)
	}
	if got := tr.final(nil); len(got) != 0 {
		t.Fatalf("final() right after restore = %v; want none (nothing changed)", got)
	}
	if got, ok := tr.resume(0, 10); !ok || got.offset != 10 || !slices.Equal(got.ahead, ahead) {
		t.Fatalf("resume(0, 10) = %+v, %v; want offset 10 skipping %v, true (the committed offset)", got, ok, ahead)
	}

	steps := []struct {
		name     string
		offset   int64 // fetched (the reader skipped what lies between), then finished
		wantMark int64
		wantMeta string
	}{
		{name: "the committed offset finishes: the mark jumps the first run", offset: 10, wantMark: 50, wantMeta: "s1:50:1+49"},
		{name: "the second hole finishes: the mark jumps the second run", offset: 50, wantMark: 100},
		{name: "new offsets as usual", offset: 100, wantMark: 101},
	}
	for _, st := range steps {
		n := &pendingOffset{partition: 0, offset: st.offset}
		if !tr.add(n) {
			t.Fatalf("%s: add(%d) = false; want true", st.name, st.offset)
		}
		tr.finish(n)
		got := tr.final(nil)
		want := []partitionMark{{Partition: 0, Offset: st.wantMark, Metadata: st.wantMeta}}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: final() = %v; want %v", st.name, got, want)
		}
		tr.setCommitted(got)
	}
	if got, _ := tr.resume(0, 101); len(got.ahead) != 0 {
		t.Errorf("resume(0, 101) after the reader passed every run skips %v; want none", got.ahead)
	}
}

// An offset of a restored run that is fetched after all (the runs were read
// again) is tracked as unfinished; the rest of the run stays finished.
func TestCommitTrackerRestoredRunFetchedAfterAllIsUnfinished(t *testing.T) {
	tr := newCommitTracker()
	if _, err := tr.restore(0, 10, "s1:10:1+10"); err != nil { // 11..20
		t.Fatal(err)
	}
	for _, o := range []int64{10, 11} {
		n := &pendingOffset{partition: 0, offset: o}
		tr.add(n)
		if o == 10 {
			tr.finish(n)
		}
	}
	got := tr.final(nil)
	if want := []partitionMark{{Partition: 0, Offset: 11, Metadata: "s1:11:1+9"}}; !slices.Equal(got, want) {
		t.Fatalf("final() = %v; want %v", got, want)
	}
}

// Metadata longer than the limit keeps the runs nearest the mark; after the
// broker refused it, the limit halves down to none.
func TestCommitTrackerMetadataStaysWithinTheLimitAndShrinks(t *testing.T) {
	tr := newCommitTracker()
	const n = 20000
	for o := range int64(n) {
		p := &pendingOffset{partition: 0, offset: o}
		tr.add(p)
		if o%2 == 1 { // every other offset pending: the longest metadata
			tr.finish(p)
		}
	}
	limits := []int{kafkaMetadataMax}
	for limit := kafkaMetadataMax; limit > 0; {
		limit = tr.shrinkMetadata()
		limits = append(limits, limit)
	}
	if want := []int{4096, 2048, 1024, 512, 256, 128, 64, 0}; !slices.Equal(limits, want) {
		t.Fatalf("limits after each shrinkMetadata = %v; want %v", limits, want)
	}

	tr = newCommitTracker()
	for o := range int64(n) {
		p := &pendingOffset{partition: 0, offset: o}
		tr.add(p)
		if o%2 == 1 {
			tr.finish(p)
		}
	}
	for _, limit := range limits {
		got := tr.final(nil)
		if len(got) != 1 {
			t.Fatalf("limit %d: final() = %v; want one mark", limit, got)
		}
		md := got[0].Metadata
		runs := mustParseFinished(t, 0, md)
		if len(md) > limit || (limit >= kafkaMetadataMin && len(runs) == 0) {
			t.Fatalf("limit %d: metadata of %d bytes with %d runs", limit, len(md), len(runs))
		}
		for i, r := range runs {
			if want := int64(2*i + 1); r.from != want || r.to != want {
				t.Fatalf("limit %d: run %d = %v; want {%d %d} (the lowest finished offsets first)", limit, i, r, want, want)
			}
		}
		t.Logf("limit %d: %d bytes record %d finished offsets", limit, len(md), len(runs))
		tr.setCommitted(got)
		tr.shrinkMetadata()
	}
}

// trackerRun is a commitTracker driven the way kafkaSession drives it, with
// the nodes of the offsets fetched from it.
type trackerRun struct {
	tr      *commitTracker
	nodes   map[[2]int64]*pendingOffset // by partition and offset: the current holder's
	revoked map[[2]int64]*pendingOffset // those of partitions given away
}

// trackerStep is one thing that happens to the tracker in a table test; do
// returns what went otherwise than the step expects.
type trackerStep struct {
	name string
	do   func(r *trackerRun) error
}

func nodeKey(p int, o int64) [2]int64 { return [2]int64{int64(p), o} }

// onFetch adds offsets from..to of partition p, as Fetch hands them out.
func onFetch(p int, from, to int64) trackerStep {
	return trackerStep{fmt.Sprintf("fetch %d/%d..%d", p, from, to), func(r *trackerRun) error {
		for o := from; o <= to; o++ {
			n := &pendingOffset{partition: p, offset: o}
			if !r.tr.add(n) {
				return fmt.Errorf("add(%d/%d) = false; want true", p, o)
			}
			r.nodes[nodeKey(p, o)] = n
		}
		return nil
	}}
}

// onAck finishes offsets of p, in the order given: their outcome is final.
func onAck(p int, offsets ...int64) trackerStep {
	return trackerStep{fmt.Sprintf("ack %d/%v", p, offsets), func(r *trackerRun) error {
		for _, o := range offsets {
			r.tr.finish(r.nodes[nodeKey(p, o)])
		}
		return nil
	}}
}

// onHandBack gives offsets of p back without an outcome: a Nack waiting for
// redelivery, or a message dropped at Close or after a revocation, which the
// broker delivers again. The session tells the tracker nothing, so the
// offset stays unfinished; the step checks that it is.
func onHandBack(p int, offsets ...int64) trackerStep {
	return trackerStep{fmt.Sprintf("hand back %d/%v", p, offsets), func(r *trackerRun) error {
		for _, o := range offsets {
			if n := r.nodes[nodeKey(p, o)]; n == nil || n.finished {
				return fmt.Errorf("%d/%d is not fetched and unfinished", p, o)
			}
		}
		return nil
	}}
}

// onCommit stages the commits that changed (advanced), which must be want,
// and the group takes them (setCommitted).
func onCommit(want ...partitionMark) trackerStep {
	return trackerStep{fmt.Sprintf("commit %v", want), func(r *trackerRun) error {
		got := sortedMarks(r.tr.advanced(nil))
		r.tr.setCommitted(got)
		return diffMarks("advanced()", got, want)
	}}
}

// onCommitFailed stages the commits that changed, which must be want, and
// the group refuses them (retry).
func onCommitFailed(want ...partitionMark) trackerStep {
	return trackerStep{fmt.Sprintf("commit %v fails", want), func(r *trackerRun) error {
		got := sortedMarks(r.tr.advanced(nil))
		r.tr.retry(got)
		return diffMarks("advanced()", got, want)
	}}
}

func sortedMarks(marks []partitionMark) []partitionMark {
	slices.SortFunc(marks, func(a, b partitionMark) int { return a.Partition - b.Partition })
	return marks
}

func diffMarks(call string, got, want []partitionMark) error {
	if !slices.Equal(got, want) {
		return fmt.Errorf("%s = %v; want %v", call, got, want)
	}
	return nil
}

// onRevoke gives p to another member (drop).
func onRevoke(p int) trackerStep {
	return trackerStep{fmt.Sprintf("revoke %d", p), func(r *trackerRun) error {
		r.tr.drop(p)
		for k, n := range r.nodes {
			if k[0] == int64(p) {
				r.revoked[k] = n
				delete(r.nodes, k)
			}
		}
		return nil
	}}
}

// onAckRevoked finishes offsets of p fetched before p was revoked.
func onAckRevoked(p int, offsets ...int64) trackerStep {
	return trackerStep{fmt.Sprintf("ack revoked %d/%v", p, offsets), func(r *trackerRun) error {
		for _, o := range offsets {
			if r.tr.finish(r.revoked[nodeKey(p, o)]) {
				return fmt.Errorf("finish(revoked %d/%d) = true; want false", p, o)
			}
		}
		return nil
	}}
}

// onKeep has the next generation assign p to this member again at
// assigned; want is where its reader resumes, or -1 when the tracker is to
// refuse to keep p.
func onKeep(p int, assigned, want int64) trackerStep {
	return trackerStep{fmt.Sprintf("keep %d at %d", p, assigned), func(r *trackerRun) error {
		start, ok := r.tr.resume(p, assigned)
		if want < 0 && ok || want >= 0 && (!ok || start.offset != want || start.restore) {
			return fmt.Errorf("resume(%d, %d) = %+v, %v; want offset %d (-1: false)", p, assigned, start, ok, want)
		}
		return nil
	}}
}

// onRegain has this member take p over from the group, committed at
// committed with metadata md: want are the runs its reader skips, and
// wantErr is in the error ("" for none). Without runs, the reader starts at
// committed and skips nothing.
func onRegain(p int, committed int64, md string, wantErr string, want ...offsetRange) trackerStep {
	return trackerStep{fmt.Sprintf("regain %d at %d with %q", p, committed, md), func(r *trackerRun) error {
		got, err := r.tr.restore(p, committed, md)
		switch {
		case !slices.Equal(got, want):
			return fmt.Errorf("restore() skips %v; want %v", got, want)
		case (err == nil) != (wantErr == "") || err != nil && !strings.Contains(err.Error(), wantErr):
			return fmt.Errorf("restore() error = %v; want %q", err, wantErr)
		}
		if start, _ := r.tr.resume(p, committed); len(want) == 0 && (!start.restore || start.offset != committed) {
			return fmt.Errorf("resume(%d, %d) after a restore without runs = %+v; want the reader at %d, skipping nothing",
				p, committed, start, committed)
		}
		return nil
	}}
}

// passedUnfinished returns an error when the mark of a partition passes one
// of its unfinished offsets: a commit of a message without a final outcome.
func (r *trackerRun) passedUnfinished() error {
	for k, n := range r.nodes {
		if mark, ok := r.tr.markOf(int(k[0])); ok && !n.finished && mark > k[1] {
			return fmt.Errorf("markOf(%d) = %d passes %d/%d, which is unfinished", k[0], mark, k[0], k[1])
		}
	}
	return nil
}

// trackerScenario is a table test of the tracker: the steps it takes, and
// what the end of a generation commits (final) after them.
type trackerScenario struct {
	name string
	give []trackerStep
	want []partitionMark
}

// p0 is a mark of partition 0.
func p0(offset int64, md string) partitionMark {
	return partitionMark{Partition: 0, Offset: offset, Metadata: md}
}

// trackerScenarios are the table of
// TestCommitTrackerCommitsNothingPastAnOffsetWithoutAFinalOutcome.
var trackerScenarios = []trackerScenario{
	{
		name: "out-of-order settles commit the contiguous run and record the rest",
		give: []trackerStep{onFetch(0, 0, 5), onAck(0, 5, 3, 1, 0)},
		want: []partitionMark{p0(2, "s1:2:1+1,1+1")},
	},
	{
		name: "out-of-order settles of everything commit past the last",
		give: []trackerStep{onFetch(0, 0, 5), onAck(0, 4, 2, 0, 5, 3, 1)},
		want: []partitionMark{p0(6, "")},
	},
	{
		name: "each commit stages only what changed since the last",
		give: []trackerStep{
			onFetch(0, 0, 3), onFetch(1, 10, 11), onAck(0, 1), onCommit(p0(0, "s1:0:1+1")),
			onAck(1, 10), onCommit(partitionMark{Partition: 1, Offset: 11}), onAck(0, 0),
		},
		want: []partitionMark{p0(2, "")},
	},
	{
		name: "a failed commit is staged again",
		give: []trackerStep{onFetch(0, 0, 1), onAck(0, 0), onCommitFailed(p0(1, "")), onCommit(p0(1, ""))},
	},
	{
		name: "a handed-back message holds its partition's mark",
		give: []trackerStep{onFetch(0, 0, 4), onHandBack(0, 2), onAck(0, 0, 1, 3, 4)},
		want: []partitionMark{p0(2, "s1:2:1+2")},
	},
	{
		name: "a handed-back message redelivered and acked releases the mark",
		give: []trackerStep{
			onFetch(0, 0, 4), onHandBack(0, 2), onAck(0, 0, 1, 3, 4), onCommit(p0(2, "s1:2:1+2")), onAck(0, 2),
		},
		want: []partitionMark{p0(5, "")},
	},
	{
		name: "a hand-back holds only its own partition",
		give: []trackerStep{onFetch(0, 0, 2), onFetch(1, 0, 2), onHandBack(0, 0), onAck(0, 1, 2), onAck(1, 0, 1, 2)},
		want: []partitionMark{p0(0, "s1:0:1+2"), {Partition: 1, Offset: 3}},
	},
	{
		name: "a revoked partition commits nothing more, whatever is acked of it",
		give: []trackerStep{onFetch(0, 0, 3), onAck(0, 0), onCommit(p0(1, "")), onRevoke(0), onAckRevoked(0, 1, 2, 3)},
	},
	{
		name: "a partition regained afresh starts at the group's offset; acks from before count for nothing",
		give: []trackerStep{
			onFetch(0, 0, 3), onAck(0, 0), onCommit(p0(1, "")), onRevoke(0),
			onFetch(0, 1, 3), onAck(0, 2), onAckRevoked(0, 1, 3),
		},
		want: []partitionMark{p0(1, "s1:1:1+1")},
	},
	{
		name: "a partition regained with metadata skips its runs, and the mark passes them",
		give: []trackerStep{
			onRegain(0, 10, "s1:10:1+4", "", offsetRange{11, 14}), onFetch(0, 10, 10), onFetch(0, 15, 16), onAck(0, 10, 16),
		},
		want: []partitionMark{p0(15, "s1:15:1+1")},
	},
	{
		name: "a partition regained with malformed metadata skips nothing",
		give: []trackerStep{onRegain(0, 10, "s1:10:1+x", `run 1 "1+x"`), onFetch(0, 10, 14), onAck(0, 10, 12)},
		want: []partitionMark{p0(11, "s1:11:1+1")},
	},
	{
		name: "a partition regained with another offset's metadata skips nothing",
		give: []trackerStep{onRegain(0, 10, "s1:9:1+4", "written for offset 9"), onFetch(0, 10, 14), onAck(0, 10, 14)},
		want: []partitionMark{p0(11, "s1:11:3+1")},
	},
	{
		name: "a partition kept across generations keeps its handed-back message",
		give: []trackerStep{
			onFetch(0, 0, 4), onHandBack(0, 1), onAck(0, 0, 2, 3, 4), onCommit(p0(1, "s1:1:1+3")),
			onKeep(0, 1, 5), onHandBack(0, 1), onFetch(0, 5, 5), onAck(0, 1),
		},
		want: []partitionMark{p0(5, "")},
	},
	{
		name: "a partition whose group offset passed its mark is not kept, and starts afresh",
		give: []trackerStep{onFetch(0, 0, 4), onAck(0, 0), onKeep(0, 3, -1), onRevoke(0), onFetch(0, 3, 4), onAck(0, 3)},
		want: []partitionMark{p0(4, "")},
	},
}

// The tracker commits no offset past one without a final outcome, whatever
// the order of the settles, the hand-backs and the rebalances.
func TestCommitTrackerCommitsNothingPastAnOffsetWithoutAFinalOutcome(t *testing.T) {
	for _, tt := range trackerScenarios {
		t.Run(tt.name, func(t *testing.T) {
			r := &trackerRun{
				tr:      newCommitTracker(),
				nodes:   make(map[[2]int64]*pendingOffset),
				revoked: make(map[[2]int64]*pendingOffset),
			}
			for i, st := range tt.give {
				if err := st.do(r); err != nil {
					t.Fatalf("step %d, %s: %v", i+1, st.name, err)
				}
				if err := r.passedUnfinished(); err != nil {
					t.Fatalf("after step %d, %s: %v", i+1, st.name, err)
				}
			}
			if got := sortedMarks(r.tr.final(nil)); !slices.Equal(got, tt.want) {
				t.Errorf("final() = %v; want %v", got, tt.want)
			}
		})
	}
}

// What one member commits of a partition, its next owner restores: the new
// reader starts at the committed offset and skips only offsets that finished,
// the lowest first, all of them while they fit in the metadata; it never
// skips one without a final outcome.
func TestCommitTrackerNextOwnerSkipsOnlyWhatFinished(t *testing.T) {
	scattered := permutation(500, 7)
	tests := []struct {
		name     string
		give     int64 // offsets 0..give-1 fetched
		finished func(o int64) bool
		whole    bool // every finished offset fits in the metadata
	}{
		{name: "none finished", give: 10, finished: func(int64) bool { return false }, whole: true},
		{name: "all finished", give: 10, finished: func(int64) bool { return true }, whole: true},
		{name: "the first held back", give: 100, finished: func(o int64) bool { return o != 0 }, whole: true},
		{name: "every other held back", give: 100, finished: func(o int64) bool { return o%2 == 1 }, whole: true},
		{name: "scattered", give: 500, finished: func(o int64) bool { return scattered[o]%3 != 0 }, whole: true},
		{name: "every tenth held back, past the metadata limit", give: 20000, finished: func(o int64) bool { return o%10 != 3 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			last := newCommitTracker()
			for o := range tt.give {
				n := &pendingOffset{partition: 0, offset: o}
				last.add(n)
				if tt.finished(o) {
					last.finish(n)
				}
			}
			committed, md := int64(0), "" // nothing to commit: the group stays at the first offset
			if marks := last.final(nil); len(marks) == 1 {
				committed, md = marks[0].Offset, marks[0].Metadata
			}
			skip, err := newCommitTracker().restore(0, committed, md)
			if err != nil {
				t.Fatalf("restore(0, %d, %q): %v", committed, truncateText(md, 40), err)
			}
			skipped := make(map[int64]bool)
			for _, r := range skip {
				for o := r.from; o <= r.to; o++ {
					skipped[o] = true
				}
			}
			gap := false // a finished offset above committed that is not skipped
			for o := range tt.give {
				switch {
				case o < committed && !tt.finished(o):
					t.Fatalf("committed %d passes %d, which did not finish", committed, o)
				case skipped[o] && !tt.finished(o):
					t.Fatalf("the next owner skips %d, which did not finish", o)
				case skipped[o] && gap:
					t.Fatalf("the next owner skips %d above a finished offset it reads again", o)
				case o > committed && tt.finished(o) && !skipped[o]:
					gap = true
				}
			}
			if gap && tt.whole {
				t.Errorf("metadata %q leaves out finished offsets; want all of them", truncateText(md, 60))
			}
			if !tt.whole && len(skipped) == 0 {
				t.Errorf("metadata %q has no finished offsets; want as many as fit", truncateText(md, 60))
			}
		})
	}
}
