// Command ctorprobe is a cgo program linked the way the release binary is
// (scripts/release-ld.sh), for scripts/release_test.go: its C constructor
// must have run before main, and it calls through pthread_create and dlopen,
// which glibc 2.34 moved from libpthread and libdl into libc.
package main

/*
#cgo LDFLAGS: -ldl -lpthread
#include <dlfcn.h>
#include <pthread.h>
static int ctor_ran;
__attribute__((constructor)) static void ctor(void) { ctor_ran = 42; }
static int ctor_value(void) { return ctor_ran; }
static void *echo(void *arg) { return arg; }
static int thread_ok(void) {
	pthread_t t;
	void *r = 0;
	if (pthread_create(&t, 0, echo, (void *)7) != 0) return 0;
	pthread_join(t, &r);
	return r == (void *)7;
}
static int dlopen_ok(void) {
	void *h = dlopen("libm.so.6", RTLD_NOW);
	if (!h) return 0;
	int ok = dlsym(h, "cos") != 0;
	dlclose(h);
	return ok;
}
*/
import "C"

import "fmt"

func main() {
	fmt.Printf("constructor %d, thread %d, dlopen %d\n", C.ctor_value(), C.thread_ok(), C.dlopen_ok())
}
