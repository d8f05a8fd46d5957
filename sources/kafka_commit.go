package sources

import "sync"

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
// The zero value is not usable; call newCommitTracker. commitTracker is safe
// for concurrent use by multiple goroutines.
type commitTracker struct {
	mu    sync.Mutex
	parts map[int]*partitionMarks
}

// pendingOffset is one fetched offset while it is unfinished. Set partition
// and offset before commitTracker.add.
type pendingOffset struct {
	partition  int
	offset     int64
	part       *partitionMarks // set by add
	prev, next *pendingOffset
	finished   bool
}

// partitionMarks is the state of one partition.
type partitionMarks struct {
	id         int
	head, tail *pendingOffset // unfinished offsets, lowest first
	unfinished int
	last       int64 // the last offset added
	base       int64 // the first offset added: the mark before any finish
	committed  int64 // the last mark committed, or base
	dirty      bool  // the mark advanced since advanced last returned it
}

// partitionMark is the offset a partition may commit: every offset below
// Offset has finished (or was never fetched, being in a gap of the log).
type partitionMark struct {
	Partition int
	Offset    int64
}

func newCommitTracker() *commitTracker {
	return &commitTracker{parts: make(map[int]*partitionMarks)}
}

// mark returns the committable offset of p. It requires that the tracker's mu
// is held.
func (p *partitionMarks) mark() int64 {
	if p.head != nil {
		return p.head.offset
	}
	return p.last + 1
}

// add starts tracking n as fetched and unfinished. It returns false, and
// tracks nothing, when n's offset is not past the last offset added for its
// partition: a reader read it again while the first copy is either still
// unfinished here, and will be settled, or already finished. The caller drops
// the copy. Offsets may skip ahead (gaps in a compacted log).
func (t *commitTracker) add(n *pendingOffset) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.parts[n.partition]
	if p == nil {
		p = &partitionMarks{id: n.partition, last: n.offset - 1, base: n.offset, committed: n.offset}
		t.parts[n.partition] = p
	}
	if n.offset <= p.last {
		return false
	}
	p.last = n.offset
	n.part, n.next, n.prev, n.finished = p, nil, p.tail, false
	if p.tail != nil {
		p.tail.next = n
	} else {
		p.head = n
	}
	p.tail = n
	p.unfinished++
	return true
}

// finish marks n finished and reports whether its partition's mark advanced,
// which happens when n was the lowest unfinished offset. Finishing n twice,
// a node never added, or one of a dropped partition, does nothing.
func (t *commitTracker) finish(n *pendingOffset) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := n.part
	if p == nil || n.finished {
		return false
	}
	n.finished = true
	wasHead := n.prev == nil
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		p.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		p.tail = n.prev
	}
	n.prev, n.next = nil, nil
	p.unfinished--
	// Only the lowest unfinished offset holds the mark: finishing it moves
	// the mark to the next unfinished offset, or past the last one fetched.
	if wasHead {
		p.dirty = true
	}
	return wasHead && t.parts[p.id] == p // not a dropped partition
}

// advanced appends to buf the marks of the partitions whose mark advanced
// since the last call, and returns it.
func (t *commitTracker) advanced(buf []partitionMark) []partitionMark {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.parts {
		if p.dirty {
			p.dirty = false
			buf = append(buf, partitionMark{Partition: p.id, Offset: p.mark()})
		}
	}
	return buf
}

// retry marks the partitions of marks, returned by advanced or final, as
// advanced again, so that the next call to advanced returns their marks
// again (they could not be committed).
func (t *commitTracker) retry(marks []partitionMark) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range marks {
		if p := t.parts[m.Partition]; p != nil {
			p.dirty = true
		}
	}
}

// final appends to buf the mark of every partition whose mark has moved past
// the last one committed (setCommitted) or, when none was, the first offset
// fetched from it, advanced or not since the last call: what the end of a
// generation commits, in case an earlier commit was lost.
func (t *commitTracker) final(buf []partitionMark) []partitionMark {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.parts {
		p.dirty = false
		if m := p.mark(); m > p.committed {
			buf = append(buf, partitionMark{Partition: p.id, Offset: m})
		}
	}
	return buf
}

// setCommitted records that marks, returned by advanced or final, were
// committed.
func (t *commitTracker) setCommitted(marks []partitionMark) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range marks {
		if p := t.parts[m.Partition]; p != nil {
			p.committed = max(p.committed, m.Offset)
		}
	}
}

// drop forgets partition: a rebalance gave it to another member. Its
// offsets still unfinished are never committed from here, and the partition
// starts afresh if it is assigned here again. Finishing a node of the
// dropped partition does nothing that add, advanced or final can see.
func (t *commitTracker) drop(partition int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.parts, partition)
}

// next returns the offset after the last one added for partition, where its
// reading resumes, and false when nothing was added.
func (t *commitTracker) next(partition int) (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.parts[partition]
	if p == nil {
		return 0, false
	}
	return p.last + 1, true
}

// markOf returns the committable offset of partition, and false when nothing
// was fetched from it.
func (t *commitTracker) markOf(partition int) (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.parts[partition]
	if p == nil {
		return 0, false
	}
	return p.mark(), true
}

// unfinished returns how many offsets of partition are unfinished.
func (t *commitTracker) unfinished(partition int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.parts[partition]; p != nil {
		return p.unfinished
	}
	return 0
}
