package catalog

// Resource attributes of a process that otelctx (and a profiler) observe
// themselves. A process's published values for them are never used: an SDK
// in a container publishes its namespace's PID, and any process may claim
// another's executable.
const (
	KeyPID            = "process.pid"
	KeyCreationTime   = "process.creation.time"
	KeyExecutableName = "process.executable.name"
	KeyExecutablePath = "process.executable.path"
)

// Observed reports whether key is one of the observed attributes, whose
// published value is ignored.
func Observed(key string) bool {
	switch key {
	case KeyPID, KeyCreationTime, KeyExecutableName, KeyExecutablePath:
		return true
	}
	return false
}
