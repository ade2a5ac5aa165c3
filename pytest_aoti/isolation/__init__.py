"""Engine calls in a child process: a crash or a hang there costs that process only."""
