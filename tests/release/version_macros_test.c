/* <skipring/version.h> (generated from CMake's project() version) through <skipring/skipring.h>
 * must hold the version CMake configured: EXPECT_VERSION_{MAJOR,MINOR,PATCH,STRING} come from
 * tests/release/CMakeLists.txt (PROJECT_VERSION*). Checked at compile time (#error) and at
 * run time (the string; exit 1 naming both). */
#include <skipring/skipring.h>
#include <stdio.h>
#include <string.h>

#if SKIPRING_VERSION_MAJOR != EXPECT_VERSION_MAJOR || \
    SKIPRING_VERSION_MINOR != EXPECT_VERSION_MINOR || \
    SKIPRING_VERSION_PATCH != EXPECT_VERSION_PATCH
#error "skipring/version.h disagrees with CMake's project() version"
#endif
#if SKIPRING_VERSION != \
    EXPECT_VERSION_MAJOR * 10000 + EXPECT_VERSION_MINOR * 100 + EXPECT_VERSION_PATCH
#error "SKIPRING_VERSION disagrees with MAJOR/MINOR/PATCH"
#endif

int main(void) {
  if (strcmp(SKIPRING_VERSION_STRING, EXPECT_VERSION_STRING) != 0) {
    fprintf(stderr, "version_macros_test: SKIPRING_VERSION_STRING \"%s\", CMake's \"%s\"\n",
            SKIPRING_VERSION_STRING, EXPECT_VERSION_STRING);
    return 1;
  }
  printf("version_macros_test: %s (%d.%d.%d) as configured\n", SKIPRING_VERSION_STRING,
         SKIPRING_VERSION_MAJOR, SKIPRING_VERSION_MINOR, SKIPRING_VERSION_PATCH);
  return 0;
}
