// Package identity reads a process's place in its job from the variables
// its launcher set (torchrun, DLRover, Open MPI, PMIx, Slurm, PaddlePaddle,
// Horovod): rank, local rank, world sizes, the job and its incarnation,
// with the precedence when several launchers' variables are present, and
// the node labels a dump carries (labels.go). It is pure: the caller reads
// the environment.
package identity

import (
	"strconv"
	"strings"
)

// Identity is a process's place in its job.
type Identity struct {
	Rank, LocalRank   int
	World, LocalWorld int
	// FromEnv is true when a launcher's variables gave the rank (Source
	// names which). When false the loop takes the rank of the first
	// NCCL/MCCL communicator the process creates (SourceNCCL), else
	// numbers it by order of appearance (SourceOrder).
	FromEnv bool
	Source  Source
	// Job groups the processes of one job on the node: a hang dumps the
	// other ranks of the same job. From TORCHELASTIC_RUN_ID, else
	// MASTER_ADDR:MASTER_PORT, else the launcher's job id (Open MPI, PMIx,
	// Slurm, Paddle), else "".
	Job string
	// Incarnation counts the job's restarts: TORCHELASTIC_RESTART_COUNT
	// where the launcher sets it, else SLURM_RESTART_COUNT (a requeued
	// Slurm job: same job id, set from the first requeue on); Of gives -1
	// when the environment
	// does not say, and the agent then counts the restarts it sees itself
	// (ranks.Book, "Incarnations").
	Incarnation int
}

// Source says where an identity's rank came from: a launcher's
// variables (the launcher's name), the first communicator, or the order
// of appearance.
type Source string

// Where a rank comes from.
const (
	SourceNCCL  Source = "nccl"  // the rank and size of its first communicator
	SourceOrder Source = "order" // numbered by order of appearance
)

// Known says whether id names its rank: from the environment or from a
// communicator, not assumed.
func (id Identity) Known() bool { return id.FromEnv || id.Source == SourceNCCL }

// Local is id's local rank, its rank where the launcher names none (a
// single node).
func (id Identity) Local() int {
	if id.LocalRank < 0 {
		return id.Rank
	}
	return id.LocalRank
}

// restartCounts are the variables a launcher counts a job's restarts in,
// the first one set wins: torchrun's (under srun too) before Slurm's.
var restartCounts = []string{"TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT"}

// launcher names where one launcher puts a process's place in its job:
// environment variables for rank, world size, local rank and local size
// ("" where it sets none).
type launcher struct {
	name                         Source
	rank, world, local, localNum string
}

// launchers in order of precedence: the first whose rank variable holds a
// number gives the identity, all four fields from its own variables. The
// torchrun family comes first because it is set on purpose by the code
// that runs the ranks (torchrun, DLRover, ColossalAI, DeepSpeed), also
// under mpirun or srun; Open MPI before Horovod, which runs over it, and
// before PMIx, which Open MPI sets too.
var launchers = []launcher{
	{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
	{"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
	{"horovod", "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE"},
	{"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
	{"pmix", "PMIX_RANK", "", "", ""},
	{"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
	{"paddle", "PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM", "PADDLE_LOCAL_RANK", ""},
}

// jobKeys name a job, in order of precedence: a variable (or two joined by
// ':') whose value is the same for every rank of one run of the job.
var jobKeys = [][]string{
	{"TORCHELASTIC_RUN_ID"},
	{"MASTER_ADDR", "MASTER_PORT"},
	{"OMPI_MCA_ess_base_jobid"},
	{"PMIX_NAMESPACE"},
	{"SLURM_JOB_ID", "SLURM_STEP_ID"},
	{"PADDLE_JOB_ID"},
}

// Of reads the identity from an environment (see launchers for
// the precedence; README.md has the table).
func Of(env map[string]string) Identity {
	id := Identity{Rank: -1, LocalRank: -1, Incarnation: -1}
	num := func(k string) (int, bool) {
		if k == "" {
			return 0, false
		}
		v, ok := env[k]
		if !ok {
			return 0, false
		}
		// Slurm writes SLURM_NTASKS_PER_NODE as "4" or "4(x2)".
		v = strings.TrimSpace(v)
		if i := strings.IndexAny(v, "(,"); i > 0 {
			v = v[:i]
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1<<24 {
			return 0, false
		}
		return n, true
	}
	for _, l := range launchers {
		r, ok := num(l.rank)
		if !ok {
			continue
		}
		id.Rank, id.FromEnv, id.Source = r, true, l.name
		if w, ok := num(l.world); ok && w > 0 {
			id.World = w
		}
		if lr, ok := num(l.local); ok {
			id.LocalRank = lr
		}
		if lw, ok := num(l.localNum); ok && lw > 0 {
			id.LocalWorld = lw
		}
		break
	}
	for _, keys := range jobKeys {
		var vals []string
		for _, k := range keys {
			if v := env[k]; v != "" {
				vals = append(vals, v)
			}
		}
		if len(vals) > 0 {
			id.Job = strings.Join(vals, ":")
			break
		}
	}
	for _, k := range restartCounts {
		if n, ok := num(k); ok {
			id.Incarnation = n
			break
		}
	}
	return id
}
