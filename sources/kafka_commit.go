package sources

import "slices"

// commitTracker computes, per partition, the offset a consumer group may
// commit while messages finish out of order (max_in_flight > 1, retries,
// dead letters): the lowest offset fetched and not yet finished, or one past
// the last offset fetched when every fetched message has finished. Committing
// it never passes an unfinished message; a message nacked for redelivery is
// unfinished until it is acked, so it holds its partition's mark.
//
// A partition's unfinished offsets sit in a doubly linked list in fetch order,
// which is offset order, and the mark is the head of the list: adding and
// finishing are O(1), and memory is one node per unfinished offset. The caller
// owns the nodes, so it can embed them in its own per-message struct.
//
// A commit also carries, as its metadata, the offsets finished above the
// mark (see kafka_metadata.go): between unfinished offsets, and past the last
// of them. Writing it walks the unfinished offsets, once per partition per
// commit, and stops when the metadata is full. A partition taken over from
// the group (restore) starts with the offsets the committed metadata has as
// finished; the reader skips them, and the mark moves past them as if they
// had been fetched and finished here.
//
// commitTracker is a value of offsets alone: it does no I/O, starts no
// goroutine and reads no clock. The session tells it what was fetched,
// settled, committed, and which partitions a generation keeps, takes over or
// gives away, and asks it what to commit; a test drives it the same way.
//
// The zero value is not usable; call newCommitTracker. commitTracker is not
// safe for concurrent use: kafkaSession guards it with its mu.
type commitTracker struct {
	parts       map[int]*partitionMarks
	metadataMax int // the most bytes of metadata per commit; 0: none
}

// pendingOffset is one fetched offset while it is unfinished. Set partition
// and offset before commitTracker.add.
type pendingOffset struct {
	partition int
	offset    int64
	part      *partitionMarks // set by add
	list      unfinishedLinks[pendingOffset]
	finished  bool
}

func (n *pendingOffset) links() *unfinishedLinks[pendingOffset] { return &n.list }

// partitionMarks is the state of one partition.
type partitionMarks struct {
	id      int
	pending unfinished[pendingOffset, *pendingOffset] // lowest offset first
	last    int64                                     // the last offset added
	// ahead are the offsets above last that were finished before this
	// member took the partition (restore), lowest first, disjoint and not
	// adjacent: the reader skips them.
	ahead         []offsetRange
	committed     int64  // the last mark committed; at first the first offset added, or the restored one
	committedMeta string // the metadata committed with it
	changed       bool   // the mark or the offsets finished above it changed since advanced last returned it
}

// partitionMark is what a partition may commit: every offset below Offset
// has finished (or was never fetched, being in a gap of the log), and so
// have those Metadata records above it.
type partitionMark struct {
	Partition int
	Offset    int64
	Metadata  string
}

func newCommitTracker() *commitTracker {
	return &commitTracker{parts: make(map[int]*partitionMarks), metadataMax: kafkaMetadataMax}
}

// mark returns the committable offset of p.
func (p *partitionMarks) mark() int64 {
	if p.pending.first != nil {
		return p.pending.first.offset
	}
	m := p.last + 1
	if len(p.ahead) > 0 && p.ahead[0].from == m {
		m = p.ahead[0].to + 1 // finished before: no need to read it first
	}
	return m
}

// metadata returns the metadata of a commit of p's mark, in at most max
// bytes: the offsets finished above the mark.
func (p *partitionMarks) metadata(max int) string {
	if max <= 0 {
		return ""
	}
	w := newMetadataWriter(p.mark(), max)
	if p.pending.first != nil {
		// Between two unfinished offsets, and after the last one up to the
		// last offset added, everything is finished (or a gap of the log).
		prev := p.pending.first.offset
		for n := p.pending.next(p.pending.first); n != nil && !w.full; n = p.pending.next(n) {
			if n.offset > prev+1 {
				w.add(prev+1, n.offset-1)
			}
			prev = n.offset
		}
		if p.last > prev {
			w.add(prev+1, p.last)
		}
	}
	for _, r := range p.ahead {
		w.add(r.from, r.to)
	}
	return w.String()
}

// add starts tracking n as fetched and unfinished. It returns false, and
// tracks nothing, when n's offset is not past the last offset added for its
// partition: a reader read it again while the first copy is either still
// unfinished here, and will be settled, or already finished. The caller drops
// the copy. Offsets may skip ahead (gaps in a compacted log, or offsets
// finished before, which the reader skips).
func (t *commitTracker) add(n *pendingOffset) bool {
	p := t.parts[n.partition]
	if p == nil {
		p = &partitionMarks{id: n.partition, last: n.offset - 1, committed: n.offset}
		t.parts[n.partition] = p
	}
	if n.offset <= p.last {
		return false
	}
	p.last = n.offset
	p.trimAhead()
	n.part, n.finished = p, false
	p.pending.push(n)
	return true
}

// trimAhead drops from p.ahead the offsets up to p.last, which the reader
// has passed.
func (p *partitionMarks) trimAhead() {
	i := 0
	for i < len(p.ahead) && p.ahead[i].to <= p.last {
		i++
	}
	p.ahead = p.ahead[i:]
	if len(p.ahead) > 0 && p.ahead[0].from <= p.last {
		// Not skipped after all: it is tracked as unfinished, and what
		// follows it stays finished.
		p.ahead[0].from = p.last + 1
	}
}

// partitionStart is where a partition reader starts.
type partitionStart struct {
	offset int64
	// ahead are offsets past offset finished before, which the reader
	// skips: those of the committed metadata not read yet, when the member
	// keeps the partition.
	ahead []offsetRange
	// restore is set when the member takes the partition from the group:
	// the reader reads ahead from the committed metadata first.
	restore bool
}

// resume returns where the reader of partition starts in a generation that
// follows the one this member held it in, and assigns it to this member
// again at assigned: the group's committed offset, or a negative offset when
// the group has none. When anything of partition is tracked, the reader
// resumes after the last offset added and skips the runs finished before this
// member took it; otherwise it starts at assigned, after reading the
// committed metadata. resume returns false when the partition cannot be
// kept: the group's committed offset has passed its mark, so another member
// committed it meanwhile and what is tracked here is stale (drop it).
func (t *commitTracker) resume(partition int, assigned int64) (partitionStart, bool) {
	p := t.parts[partition]
	switch {
	case p == nil:
		return partitionStart{offset: assigned, restore: true}, true
	case assigned >= 0 && assigned > p.mark():
		return partitionStart{}, false
	}
	return partitionStart{offset: p.last + 1, ahead: slices.Clone(p.ahead)}, true
}

// restore starts partition afresh at the group's committed offset, with the
// runs that md, the metadata committed with it, records as finished above
// it: the mark moves past them without their being fetched. It returns those
// runs, for the reader to skip. When md records none, or does not parse (the
// error says why), it returns none and leaves partition as it was: the
// reader then skips nothing, and every message above the committed offset
// comes again, so nothing is lost.
func (t *commitTracker) restore(partition int, committed int64, md string) ([]offsetRange, error) {
	ahead, err := parseFinished(committed, md)
	if err != nil || len(ahead) == 0 {
		return nil, err
	}
	p := &partitionMarks{id: partition, last: committed - 1, committed: committed}
	p.ahead = ahead // the tracker's own: trimAhead rewrites it
	p.trimAhead()
	p.committedMeta = p.metadata(t.metadataMax)
	t.parts[partition] = p
	return slices.Clone(ahead), nil
}

// shrinkMetadata halves the most bytes of metadata a commit carries, down to
// none below kafkaMetadataMin, and returns the new limit: the broker refused
// a commit's metadata as too large.
func (t *commitTracker) shrinkMetadata() int {
	if t.metadataMax /= 2; t.metadataMax < kafkaMetadataMin {
		t.metadataMax = 0
	}
	return t.metadataMax
}

// finish marks n finished and reports whether its partition's commit
// changed: the mark advanced (n was the lowest unfinished offset), or n
// joined the offsets finished above it. Finishing n twice, a node never
// added, or one of a dropped partition, does nothing and reports false.
func (t *commitTracker) finish(n *pendingOffset) bool {
	p := n.part
	if p == nil || n.finished {
		return false
	}
	n.finished = true
	p.pending.remove(n)
	// Only the lowest unfinished offset holds the mark: finishing it moves
	// the mark to the next unfinished offset, or past the last one fetched.
	// Any other joins the finished offsets that the metadata records.
	p.changed = true
	return t.parts[p.id] == p // not a dropped partition
}

// commitOf returns p's mark and its metadata when they differ from what was
// last committed.
func (t *commitTracker) commitOf(p *partitionMarks) (partitionMark, bool) {
	m := partitionMark{Partition: p.id, Offset: p.mark(), Metadata: p.metadata(t.metadataMax)}
	return m, m.Offset > p.committed || m.Metadata != p.committedMeta
}

// advanced appends to buf the marks of the partitions whose commit changed
// since the last call (see finish), and returns it.
func (t *commitTracker) advanced(buf []partitionMark) []partitionMark {
	return t.collect(buf, false)
}

// retry marks the partitions of marks, returned by advanced or final, as
// advanced again, so that the next call to advanced returns their marks
// again (they could not be committed).
func (t *commitTracker) retry(marks []partitionMark) {
	for _, m := range marks {
		if p := t.parts[m.Partition]; p != nil {
			p.changed = true
		}
	}
}

// final appends to buf the mark of every partition whose mark has moved past
// the last one committed (setCommitted) or, when none was, the first offset
// fetched from it (or the restored one), or whose finished offsets above the
// mark differ from those last committed, changed or not since the last call:
// what the end of a generation commits, in case an earlier commit was lost.
func (t *commitTracker) final(buf []partitionMark) []partitionMark {
	return t.collect(buf, true)
}

// collect appends to buf the marks that differ from what was last committed
// (commitOf): of every partition with all, otherwise only of those whose
// commit changed since the last call. It clears the changed flag of each
// partition it looks at, and returns buf.
func (t *commitTracker) collect(buf []partitionMark, all bool) []partitionMark {
	for _, p := range t.parts {
		if !all && !p.changed {
			continue
		}
		p.changed = false
		if m, ok := t.commitOf(p); ok {
			buf = append(buf, m)
		}
	}
	return buf
}

// setCommitted records that marks, returned by advanced or final, were
// committed.
func (t *commitTracker) setCommitted(marks []partitionMark) {
	for _, m := range marks {
		if p := t.parts[m.Partition]; p != nil && m.Offset >= p.committed {
			p.committed, p.committedMeta = m.Offset, m.Metadata
		}
	}
}

// drop forgets partition: a rebalance gave it to another member. Its
// offsets still unfinished are never committed from here, and the partition
// starts afresh if it is assigned here again. Finishing a node of the
// dropped partition does nothing that add, advanced or final can see.
func (t *commitTracker) drop(partition int) {
	delete(t.parts, partition)
}

// markOf returns the committable offset of partition, and false when nothing
// of it is tracked.
func (t *commitTracker) markOf(partition int) (int64, bool) {
	p := t.parts[partition]
	if p == nil {
		return 0, false
	}
	return p.mark(), true
}

// unfinished returns how many offsets of partition are unfinished.
func (t *commitTracker) unfinished(partition int) int {
	if p := t.parts[partition]; p != nil {
		return p.pending.len
	}
	return 0
}
