package tuning

// reading reports whether a Read of rc has begun: a Read holds its
// direction's lock from its start to its end.
func reading(rc *RawConn) bool {
	if rc.r.mu.TryLock() {
		rc.r.mu.Unlock()
		return false
	}
	return true
}
