/* Cost of checking a path pointer before reading it (liblabios_preload's
 * EFAULT guard): one process_vm_readv of the path's page, or mincore,
 * against the raw baseline of the call being intercepted, access(2).
 * cc -O2 -o guard_cost guard_cost.c && ./guard_cost   (run next to this file) */
#define _GNU_SOURCE
#include <stdio.h>
#include <unistd.h>
#include <sys/uio.h>
#include <time.h>
#include <string.h>
#include <sys/mman.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(){
  const char *p="guard_cost.c"; char buf[4096]; int N=1000000; unsigned char vec[1];
  double t=now(); for(int i=0;i<N;i++) access(p,F_OK); double a=(now()-t)/N*1e9;
  t=now(); for(int i=0;i<N;i++){ struct iovec l={buf,64},r={(void*)p,64}; process_vm_readv(getpid(),&l,1,&r,1,0);} double b=(now()-t)/N*1e9;
  t=now(); for(int i=0;i<N;i++){ mincore((void*)((unsigned long)p&~4095UL),4096,vec);} double c=(now()-t)/N*1e9;
  printf("access %.0f ns, process_vm_readv %.0f ns, mincore %.0f ns\n",a,b,c);
}
