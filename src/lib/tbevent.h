/*
 * tbevent.h - the pieces of the TensorBoard event writer that tests check
 * byte for byte against docs/FORMAT.md "Exports": the masked CRC-32C, the
 * TFRecord framing and the Event encoding.
 */
#ifndef TM_TBEVENT_H
#define TM_TBEVENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* TFRecord's masked CRC of data: ((x >> 15 | x << 17) + 0xA282EAD8) mod
 * 2^32 with x the CRC-32C (Castagnoli) of rec.h's tm_crc32c. */
uint32_t tm_tb_masked_crc(const void *data, size_t len);

/* Encodes Event{wall_time [, step] [, file_version] [, summary{value{tag,
 * simple_value}}]} into buf: step when has_step, file_version when not
 * NULL, the summary when tag is not NULL.  Returns the length, -ENOSPC if
 * cap is too small, -EINVAL for a tag or version over 4096 bytes. */
int tm_tb_encode_event(uint8_t *buf, size_t cap, double wall_time, bool has_step, int64_t step,
                       const char *file_version, const char *tag, float value);

/* Frames data as one TFRecord: u64 length, u32 masked CRC of the length,
 * data, u32 masked CRC of the data (little-endian).  Returns the record's
 * length (len + 16) or -ENOSPC. */
int tm_tb_frame(uint8_t *out, size_t cap, const uint8_t *data, size_t len);

#endif
