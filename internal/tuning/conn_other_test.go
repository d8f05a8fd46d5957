//go:build !linux

package tuning

// reading is never asked outside Linux, where Wrap returns no *RawConn.
func reading(*RawConn) bool { return true }
