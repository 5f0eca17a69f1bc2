# The board profiles (driver/boards/*.board) are built into the library by
# driver/board_data.c (.incbin): its object depends on them.
$(BUILD)/obj/driver/board_data.o: $(wildcard driver/boards/*.board)
