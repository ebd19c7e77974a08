package scheduler

// ErrLeaseExpired is the cause a job's context carries when its lease
// deadline passed; ErrLockLost when its lock was lost, that deadline
// included.
var (
	ErrLeaseExpired = errLeaseExpired
	ErrLockLost     = errLockLost
)
