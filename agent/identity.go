package agent

import (
	"strconv"
	"strings"
)

// Identity is a process's place in its job, from its environment
// (torchrun's names).
type Identity struct {
	Rank, LocalRank   int
	World, LocalWorld int
	// FromEnv is false when the environment has no RANK: the loop then
	// numbers the process by order of appearance.
	FromEnv bool
	// Job groups the processes of one job on the node: a hang dumps the
	// other ranks of the same job. From TORCHELASTIC_RUN_ID, else
	// MASTER_ADDR:MASTER_PORT, else "".
	Job string
}

// IdentityOf reads the identity from an environment.
func IdentityOf(env map[string]string) Identity {
	id := Identity{Rank: -1, LocalRank: -1}
	num := func(k string) (int, bool) {
		v, ok := env[k]
		if !ok {
			return 0, false
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return 0, false
		}
		return n, true
	}
	if r, ok := num("RANK"); ok {
		id.Rank, id.FromEnv = r, true
	}
	if r, ok := num("LOCAL_RANK"); ok {
		id.LocalRank = r
	}
	if w, ok := num("WORLD_SIZE"); ok && w > 0 {
		id.World = w
	}
	if w, ok := num("LOCAL_WORLD_SIZE"); ok && w > 0 {
		id.LocalWorld = w
	}
	switch {
	case env["TORCHELASTIC_RUN_ID"] != "":
		id.Job = env["TORCHELASTIC_RUN_ID"]
	case env["MASTER_ADDR"] != "" || env["MASTER_PORT"] != "":
		id.Job = env["MASTER_ADDR"] + ":" + env["MASTER_PORT"]
	}
	return id
}
