package identity

import "slices"

// Labels are a dump's node labels (the metrics' ip, job_name, pod_name).
type Labels struct {
	Host, IP, JobName, PodName string
}

// The environment variables a label is read from, the first one set (and
// not empty) winning: ours, then the platform's. The launcher's
// configuration (cmd/internal/config) binds the same lists, its flags and
// configuration file coming before them.
//
// PodNameVars name the pod (the pod spec sets POD_NAME from the downward
// API); the agent's pod filter reads them too (ranks.Scope). A label
// falls back to HOSTNAME after them (PodLabelVars), the filter does not:
// with hostNetwork (usual for RDMA) it is the node's name.
var (
	JobNameVars  = []string{"XPU_TIMER_JOB_NAME", "ELASTIC_JOB_NAME", "JOB_NAME"}
	PodNameVars  = []string{"XPU_TIMER_POD_NAME", "POD_NAME", "KUBERNETES_POD_NAME"}
	PodLabelVars = append(slices.Clip(PodNameVars), "HOSTNAME")
	IPVars       = []string{"XPU_TIMER_IP", "POD_IP"}
)

// LabelsOf reads the labels the launcher would have given a process with
// environment env (no flags, no configuration file); Host is left empty.
func LabelsOf(env map[string]string) Labels {
	first := func(names []string) string {
		for _, n := range names {
			if v := env[n]; v != "" {
				return v
			}
		}
		return ""
	}
	return Labels{IP: first(IPVars), JobName: first(JobNameVars), PodName: first(PodLabelVars)}
}
