package sources

import (
	"fmt"
	"slices"
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
