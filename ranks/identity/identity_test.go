package identity

import "testing"

// Every launcher's variables, and the precedence when several are set.
func TestIdentityLaunchers(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want Identity
	}{
		{"torchrun", map[string]string{"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "TORCHELASTIC_RUN_ID": "j", "TORCHELASTIC_RESTART_COUNT": "2"},
			Identity{Rank: 5, World: 8, LocalRank: 1, LocalWorld: 4, FromEnv: true, Source: "torchrun", Job: "j", Incarnation: 2}},
		{"openmpi", map[string]string{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "3", "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "PMIX_RANK": "3", "OMPI_MCA_ess_base_jobid": "1234"},
			Identity{Rank: 3, World: 4, LocalRank: 3, LocalWorld: 4, FromEnv: true, Source: "openmpi", Job: "1234", Incarnation: -1}},
		{"horovod over gloo", map[string]string{"HOROVOD_RANK": "2", "HOROVOD_SIZE": "16", "HOROVOD_LOCAL_RANK": "2", "HOROVOD_LOCAL_SIZE": "8"},
			Identity{Rank: 2, World: 16, LocalRank: 2, LocalWorld: 8, FromEnv: true, Source: "horovod", Incarnation: -1}},
		{"mpich", map[string]string{"PMI_RANK": "7", "PMI_SIZE": "8", "MPI_LOCALRANKID": "3", "MPI_LOCALNRANKS": "4"},
			Identity{Rank: 7, World: 8, LocalRank: 3, LocalWorld: 4, FromEnv: true, Source: "pmi", Incarnation: -1}},
		{"pmix", map[string]string{"PMIX_RANK": "1", "PMIX_NAMESPACE": "ns"},
			Identity{Rank: 1, LocalRank: -1, FromEnv: true, Source: "pmix", Job: "ns", Incarnation: -1}},
		{"slurm", map[string]string{"SLURM_PROCID": "9", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "8(x2)", "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0"},
			Identity{Rank: 9, World: 16, LocalRank: 1, LocalWorld: 8, FromEnv: true, Source: "slurm", Job: "77:0", Incarnation: -1}},
		{"slurm requeued", map[string]string{"SLURM_PROCID": "9", "SLURM_NTASKS": "16", "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0", "SLURM_RESTART_COUNT": "2"},
			Identity{Rank: 9, World: 16, LocalRank: -1, FromEnv: true, Source: "slurm", Job: "77:0", Incarnation: 2}},
		{"torchrun under a requeued srun", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "r", "TORCHELASTIC_RESTART_COUNT": "0", "SLURM_PROCID": "0", "SLURM_RESTART_COUNT": "1"},
			Identity{Rank: 1, World: 2, LocalRank: -1, FromEnv: true, Source: "torchrun", Job: "r", Incarnation: 0}},
		{"paddle", map[string]string{"PADDLE_TRAINER_ID": "4", "PADDLE_TRAINERS_NUM": "8", "PADDLE_LOCAL_RANK": "0"},
			Identity{Rank: 4, World: 8, LocalRank: 0, FromEnv: true, Source: "paddle", Incarnation: -1}},
		{"torchrun under srun", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "1", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
			Identity{Rank: 1, World: 2, LocalRank: -1, FromEnv: true, Source: "torchrun", Job: "h:1", Incarnation: -1}},
		{"none", map[string]string{"PATH": "/bin", "OMPI_COMM_WORLD_RANK": "x"},
			Identity{Rank: -1, LocalRank: -1, Incarnation: -1}},
	} {
		if got := Of(c.env); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestIdentityOf(t *testing.T) {
	id := Of(map[string]string{"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "r1"})
	if id != (Identity{Rank: 3, LocalRank: 1, World: 8, LocalWorld: 2, FromEnv: true, Source: "torchrun", Job: "r1", Incarnation: -1}) {
		t.Fatalf("%+v", id)
	}
	if id := Of(map[string]string{"RANK": "x"}); id.FromEnv || id.Rank != -1 {
		t.Fatalf("bad RANK accepted: %+v", id)
	}
}
