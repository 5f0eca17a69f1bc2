# tools.mk - programs the end-to-end scripts use (not tests themselves, so
# not named test_*): independent references.
#   BUILD/tests/tools/ref_gemm M N K SEED   the checksum `tessera gemm` must
#                                           print, from a naive loop
TEST_TOOLS := $(BUILD)/tests/tools/ref_gemm

$(BUILD)/tests/tools/%: $(BUILD)/obj/tests/tools/%.o $(TEST_COMMON_OBJS) $(STATIC_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(TSR_CFLAGS) -o $@ $< $(TEST_COMMON_OBJS) $(STATIC_LIB) -lcunit $(TSR_LIBS)

tests: $(TEST_TOOLS)
