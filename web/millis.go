package web

import "time"

// maxBodyBytes caps the bodies of the dashboard's endpoints.
const maxBodyBytes = 16 << 10

// millis is d in milliseconds, rounded up: a client that waits retry-after
// milliseconds is never early.
func millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
