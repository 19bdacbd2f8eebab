package gpu

// WaitReleaseEvery is WaitRelease with its poll interval, for tests.
var WaitReleaseEvery = waitRelease
