package pgstore

// SetLockedHook sets the hook a group runs after its first round trip while
// it holds run locks: the process tests freeze a worker there.
func SetLockedHook(f func()) { testHookLocked = f }
