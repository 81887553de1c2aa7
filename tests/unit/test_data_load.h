/* test_data_load.h - a data_load that must fail, for the data readers'
 * unit tests (one copy, header-only like test.h). */
#ifndef CTRAIN_TEST_DATA_LOAD_H
#define CTRAIN_TEST_DATA_LOAD_H

#include "test.h"
#include "worker/data/data.h"

/* data_load(spec) is CTRAIN_E_DATA, its message holding n1 and n2. */
__attribute__((unused)) static void expect_data_err(const char *spec, const data_format *fmt,
                                                    const char *n1, const char *n2) {
  data_set ds;
  char err[1024] = "";
  ASSERT_EQ(data_load(spec, fmt, DATA_SHARD_AUTO, 0, 1, &ds, err, sizeof(err)), CTRAIN_E_DATA);
  ASSERT_STR_CONTAINS(err, n1);
  ASSERT_STR_CONTAINS(err, n2);
  ASSERT_NULL(ds.x);
}

#endif
