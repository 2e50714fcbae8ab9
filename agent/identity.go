package agent

import "github.com/xpu-timer/xpu-timer/agent/identity"

// Identity is a process's place in its job (package identity).
type Identity = identity.Identity

// Labels are a dump's node labels (package identity).
type Labels = identity.Labels
